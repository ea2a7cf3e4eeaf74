package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/quantscope/quantscope/kernels"
)

// progressBar draws "label  42% [#####     ] 3/7 unit" on a terminal's
// stderr, at most ten times a second, and clears its line when the work is
// done; on anything else (a pipe, a file, a test) it draws nothing, so that
// logs stay clean. Every heavy command (stats, quantize, report, forward,
// eval, ...) shows its progress through it. Report may be called from
// several goroutines.
type progressBar struct {
	w     io.Writer
	label string
	unit  string // when set, "done/total unit" follows the bar
	mu    sync.Mutex
	last  time.Time
	drawn bool
	width int // of the last line drawn, to clear it
}

func newProgressBar(w io.Writer, label string) *progressBar {
	f, ok := w.(*os.File)
	if !ok {
		return &progressBar{}
	}
	if fi, err := f.Stat(); err != nil || fi.Mode()&os.ModeCharDevice == 0 {
		return &progressBar{}
	}
	return &progressBar{w: w, label: label}
}

// progressLine is a kernels.Progress drawing a bar labelled what, counting
// in unit, on stderr when it is a terminal (nil otherwise).
func progressLine(stderr io.Writer, what, unit string) kernels.Progress {
	p := newProgressBar(stderr, what)
	if p.w == nil {
		return nil
	}
	p.unit = unit
	return p.Report
}

// Report is a kernels.Progress.
func (p *progressBar) Report(done, total int64) {
	if p.w == nil || total <= 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if now := time.Now(); now.Sub(p.last) >= 100*time.Millisecond || done == total {
		p.last = now
		n := int(30 * min(done, total) / total)
		line := fmt.Sprintf("%s %3d%% [%s%s]", p.label, 100*done/total, strings.Repeat("#", n), strings.Repeat(" ", 30-n))
		if p.unit != "" {
			line += fmt.Sprintf(" %d/%d %s", done, total, p.unit)
		}
		fmt.Fprintf(p.w, "\r%s", line)
		p.drawn, p.width = true, len(line)
		if done >= total {
			p.clear()
		}
	}
}

// Done clears the bar's line (a bar already at 100% has cleared it).
func (p *progressBar) Done() {
	if p.w == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.clear()
}

func (p *progressBar) clear() {
	if p.drawn {
		fmt.Fprintf(p.w, "\r%s\r", strings.Repeat(" ", p.width))
		p.drawn = false
	}
}

var _ kernels.Progress = (&progressBar{}).Report
