package main

import (
	"fmt"
	"strings"

	"github.com/quantscope/quantscope/formats/checkpoint"
)

// layerMapText renders the layer map as a compact grid: one line per run of
// neighbouring layers whose cells are stored alike, one column per slot that
// holds anything, the stored format in each cell ("nvfp4+" for a cell mostly
// nvfp4 with something else beside it; the mixes are listed under the grid).
func layerMapText(rows []checkpoint.LayerRow) string {
	if len(rows) == 0 {
		return ""
	}
	used := map[string]bool{}
	for _, r := range rows {
		for _, c := range r.Cells {
			used[c.Slot] = true
		}
	}
	var slots []string
	for _, s := range checkpoint.LayerSlots {
		if used[s] {
			slots = append(slots, s)
		}
	}
	type line struct {
		label string
		cells []string
		mixes []string
	}
	var lines []line
	var lastKey string
	var runStart, runEnd int
	for i, r := range rows {
		texts := make([]string, len(slots))
		var mixes []string
		for _, c := range r.Cells {
			for j, s := range slots {
				if s == c.Slot {
					texts[j] = c.Format
					if c.Format == checkpoint.FormatMixed {
						texts[j] = c.Formats[0].Format + "+"
						var parts []string
						for _, f := range c.Formats {
							share := fmt.Sprintf("%.1f%%", 100*float64(f.Bytes)/float64(max(c.Bytes, 1)))
							if f.Bytes > 0 && 1000*f.Bytes < c.Bytes {
								share = "<0.1%"
							} else if share == "100.0%" {
								share = ">99.9%"
							}
							parts = append(parts, f.Format+" "+share)
						}
						mixes = append(mixes, c.Slot+": "+strings.Join(parts, " + "))
					}
				}
			}
		}
		key := r.Row + "\x00" + r.Stack + "\x00" + strings.Join(texts, "\x00") + "\x00" + strings.Join(mixes, "\x00")
		layered := r.Row == checkpoint.RowLayer || r.Row == checkpoint.RowExtra
		if layered && i > 0 && key == lastKey && r.Layer == runEnd+1 {
			runEnd = r.Layer
			lines[len(lines)-1].label = rowLabel(r, runStart, runEnd)
			continue
		}
		lastKey, runStart, runEnd = key, r.Layer, r.Layer
		lines = append(lines, line{label: rowLabel(r, r.Layer, r.Layer), cells: texts, mixes: mixes})
	}
	labelW := 0
	for _, l := range lines {
		labelW = max(labelW, len([]rune(l.label)))
	}
	widths := make([]int, len(slots))
	heads := make([]string, len(slots))
	for j, s := range slots {
		heads[j] = s
		if s == "embedding" {
			heads[j] = "embed"
		}
		widths[j] = len(heads[j])
		for _, l := range lines {
			widths[j] = max(widths[j], len(l.cells[j]))
		}
	}
	var b strings.Builder
	b.WriteString("  layer map (stored format by slot; neighbouring layers stored alike are folded):\n")
	row := func(label string, cells []string) {
		s := "  " + label + strings.Repeat(" ", labelW-len([]rune(label)))
		for j, c := range cells {
			s += " " + c + strings.Repeat(" ", widths[j]-len(c))
		}
		b.WriteString(strings.TrimRight(s, " ") + "\n")
	}
	row("", heads)
	for _, l := range lines {
		row(l.label, l.cells)
	}
	for _, l := range lines {
		for _, m := range l.mixes {
			fmt.Fprintf(&b, "  mixed: %s %s (of the bytes)\n", l.label, m)
		}
	}
	return b.String()
}

func rowLabel(r checkpoint.LayerRow, from, to int) string {
	var s string
	switch r.Row {
	case checkpoint.RowEmbedding, checkpoint.RowHead, checkpoint.RowOther:
		return r.Row
	}
	if from == to {
		s = fmt.Sprintf("layer %d", from)
	} else {
		s = fmt.Sprintf("layers %d–%d", from, to)
	}
	if r.Stack != "" {
		parts := strings.Split(r.Stack, ".")
		if len(parts) > 2 {
			parts = parts[len(parts)-2:]
		}
		s = strings.Join(parts, ".") + " " + strings.TrimPrefix(strings.TrimPrefix(s, "layers "), "layer ")
	}
	if r.Row == checkpoint.RowExtra {
		s += " (extra)"
	}
	return s
}
