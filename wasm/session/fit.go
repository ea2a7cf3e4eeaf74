package session

import (
	"encoding/json"
	"fmt"

	"github.com/quantscope/quantscope/formats/fit"
)

// FitRequest is the page's question to FitJSON, as quantscope.fit(opts)
// passes it: the options of `quantscope fit`, GPUs as --gpu spells them.
type FitRequest struct {
	TP      int      `json:"tp"`
	Context int      `json:"context"`
	Batch   int      `json:"batch"`
	MTP     bool     `json:"mtp"`
	W4A     string   `json:"w4a"`
	KVDType string   `json:"kv_dtype"`
	Reserve string   `json:"reserve"`
	GPUs    []string `json:"gpus"` // catalog names or NAME:GB; none: the catalog
}

// FitJSON estimates the memory to serve the open repo (fit --json's
// document, with "catalog" added: the GPUs the page offers).
func (s *Session) FitJSON(reqJSON []byte) ([]byte, error) {
	var req FitRequest
	if len(reqJSON) > 0 {
		if err := json.Unmarshal(reqJSON, &req); err != nil {
			return nil, fmt.Errorf("fit options: %w", err)
		}
	}
	o := fit.Options{TP: req.TP, Context: req.Context, Batch: req.Batch, MTP: req.MTP, W4A: req.W4A, KVDType: req.KVDType, Reserve: req.Reserve}
	for _, g := range req.GPUs {
		v, err := fit.ParseGPU(g)
		if err != nil {
			return nil, err
		}
		o.GPUs = append(o.GPUs, v)
	}
	if s.fitPlan == nil { // the modules do not change while the repo is open: place them once
		pl, err := fit.Prepare(fit.FromCheckpoint(s.ck))
		if err != nil {
			return nil, err
		}
		s.fitPlan = pl
	}
	rep, err := s.fitPlan.Estimate(o)
	if err != nil {
		return nil, err
	}
	return json.Marshal(struct {
		*fit.Report
		Catalog []fit.GPU `json:"catalog"`
	}{rep, fit.Catalog})
}
