package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"

	"github.com/quantscope/quantscope/calib"
	"github.com/quantscope/quantscope/internal/userfile"
	"github.com/quantscope/quantscope/model"
)

// perplexity is eval --json's document: {"tokens","nll","perplexity"}.
type perplexity = model.Perplexity

func cmdEval(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("eval", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, `print {"tokens","nll","perplexity"}`)
	data := fs.String("data", "", "token ids, one sequence per line (ids separated by whitespace or commas)")
	textFile := fs.String("text", "", "a text file, one sequence per non-empty line, tokenized with the repo's tokenizer.json")
	w4a := fs.String("w4a", model.W4ANone, "none, fp8 or nvfp4")
	var sc streamFlags
	sc.register(fs)
	allowOverlap := fs.Bool("allow-overlap", false, "evaluate on the file the --scales report was calibrated on")
	compare := fs.Bool("compare", false, "run the dense forward and the --w4a one side by side and report the difference")
	var sf sourceFlags
	sf.register(fs, true, true)
	pos, err := parseFlags(fs, args, 1, "SOURCE")
	if err != nil {
		return err
	}
	if (*data == "") == (*textFile == "") {
		return &usageError{msg: "eval: give --data (token ids) or --text (text lines), one of them"}
	}
	if *compare && (*w4a == model.W4ANone || *w4a == "") {
		return &usageError{msg: "eval: --compare needs --w4a fp8 or nvfp4 (the side to compare with the dense forward)"}
	}
	// The evaluation data, identified (path, sha256) so that a --scales
	// report calibrated on the same file is refused.
	var lines [][]int
	var text []string
	var evalData *calib.Data
	if *data != "" {
		if evalData, err = calib.ReadData(*data); err != nil {
			return err
		}
		lines = evalData.Seqs
	} else {
		b, err := userfile.Read(*textFile, calib.MaxDataFile)
		if err != nil {
			return fmt.Errorf("--text: %w", err)
		}
		if text, err = textLines(*textFile, b); err != nil {
			return err
		}
		evalData = calib.FileData(*textFile, b)
	}
	opt, scales, err := sc.options(*w4a, stderr)
	if err != nil {
		return err
	}
	if scales != nil {
		if err := scales.CheckOverlap(evalData, *allowOverlap); err != nil {
			return err
		}
	}
	m, closer, err := openModel(ctx, pos[0], sf)
	if err != nil {
		return err
	}
	defer closer()
	if err := m.CheckScales(opt); err != nil {
		return err
	}
	if text != nil {
		if lines, err = encodeLines(ctx, m, text, *textFile); err != nil {
			return err
		}
		*data = *textFile
	}
	modes := []string{*w4a}
	if *compare {
		modes = []string{model.W4ANone, *w4a}
	}
	var res []perplexity
	for _, mode := range modes {
		o := opt
		if mode == model.W4ANone {
			o = model.Options{}
		}
		o.W4A = mode
		p, err := evalMode(ctx, m, lines, o, *data, progressLine(stderr, "eval "+mode, "sequences"))
		if err != nil {
			return err
		}
		res = append(res, p)
	}
	if !*compare {
		if *asJSON {
			return json.NewEncoder(stdout).Encode(res[0])
		}
		_, err := fmt.Fprintf(stdout, "tokens=%d nll=%.6f perplexity=%.4f (%s)\n", res[0].Tokens, res[0].NLL, res[0].Perplexity, modeName(*w4a))
		return err
	}
	diff := map[string]float64{
		"nll":              res[1].NLL - res[0].NLL,
		"perplexity":       res[1].Perplexity - res[0].Perplexity,
		"perplexity_ratio": res[1].Perplexity / res[0].Perplexity,
	}
	if *asJSON {
		return json.NewEncoder(stdout).Encode(map[string]any{
			"dense": res[0], "w4a": res[1], "w4a_mode": *w4a, "difference": diff, "note": w4aNote,
		})
	}
	_, err = fmt.Fprintf(stdout, "dense      tokens=%d nll=%.6f perplexity=%.4f\nw4a %-6s tokens=%d nll=%.6f perplexity=%.4f\ndifference nll %+.6f, perplexity %+.4f (×%.5f)\nnote: %s\n",
		res[0].Tokens, res[0].NLL, res[0].Perplexity, *w4a, res[1].Tokens, res[1].NLL, res[1].Perplexity,
		diff["nll"], diff["perplexity"], diff["perplexity_ratio"], w4aNote)
	return err
}

func modeName(w4a string) string {
	if w4a == model.W4ANone || w4a == "" {
		return "dense float32"
	}
	return "w4a " + w4a
}

func evalMode(ctx context.Context, m *model.Model, seqs [][]int, opt model.Options, path string, progress func(done, total int64)) (perplexity, error) {
	opt.Progress = progress
	p, err := m.Perplexity(ctx, seqs, opt)
	if err != nil {
		return perplexity{}, fmt.Errorf("%s: %w", path, err)
	}
	return p, nil
}
