package calib

import (
	"encoding/json"
	"fmt"

	"github.com/quantscope/quantscope/internal/userfile"
)

// ScalesFile is a producer_maximum report read back (forward/eval --scales).
type ScalesFile struct {
	Path   string
	Recipe string
	// Attention is the policy the scales were calibrated under: "" (NVFP4)
	// or "fp8" (the mixed policy).
	Attention string
	Scales    map[string]float32
	// DataPath and DataSHA256 name the calibration file, when the report
	// names one.
	DataPath, DataSHA256 string
}

// maxScalesFile bounds an act_max report (a few hundred bytes a module).
const maxScalesFile = 64 << 20

// ReadScales reads an act_max report written by calibrate --out.
func ReadScales(path string) (*ScalesFile, error) {
	b, err := userfile.Read(path, maxScalesFile)
	if err != nil {
		return nil, fmt.Errorf("--scales: %w", err)
	}
	var doc struct {
		Algorithm    string             `json:"algorithm"`
		Recipe       string             `json:"recipe"`
		Attention    string             `json:"attention"`
		GlobalScales map[string]float32 `json:"global_scales"`
		Data         *struct {
			Path   string `json:"path"`
			SHA256 string `json:"sha256"`
		} `json:"data"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("%s: not a calibration report: %v", path, err)
	}
	if doc.Algorithm != "producer_maximum" || len(doc.GlobalScales) == 0 {
		return nil, fmt.Errorf("%s: rule scales-report: want a producer_maximum report with global_scales (calibrate --pass act_max --w4a nvfp4 --out FILE), got algorithm %q with %d scales", path, doc.Algorithm, len(doc.GlobalScales))
	}
	s := &ScalesFile{Path: path, Recipe: doc.Recipe, Attention: doc.Attention, Scales: doc.GlobalScales}
	if doc.Data != nil {
		s.DataPath, s.DataSHA256 = doc.Data.Path, doc.Data.SHA256
	}
	return s, nil
}

// CheckOverlap refuses evaluation data that is the calibration file (same
// bytes) unless allowed: a perplexity measured on the data the scales were
// fitted to flatters them.
func (s *ScalesFile) CheckOverlap(d *Data, allow bool) error {
	if allow || s.DataSHA256 == "" || s.DataSHA256 != d.SHA256 {
		return nil
	}
	return fmt.Errorf("%s: rule calibration-overlap: the evaluation data is the file the scales in %s were calibrated on (%s, sha256 %s); use held-out data or pass --allow-overlap", d.Path, s.Path, s.DataPath, s.DataSHA256)
}
