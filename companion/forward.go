package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"

	"github.com/quantscope/quantscope/calib"
	"github.com/quantscope/quantscope/internal/userfile"
	"github.com/quantscope/quantscope/kernels"
	"github.com/quantscope/quantscope/kernels/cpu"
	"github.com/quantscope/quantscope/model"
)

// w4aNote says where the reference path's numbers differ from GPT-QModel's.
const w4aNote = "W4A on the CPU reference path runs with a float32 model dtype; GPT-QModel runs FP16/BF16 on CUDA"

func cmdForward(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("forward", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, `print {"shape":[T,V],"logits":[[...],...]}`)
	tokensFlag := fs.String("tokens", "", "token ids: 1,2,3 or @FILE (ids separated by whitespace or commas)")
	textFlag := fs.String("text", "", "text, tokenized with the repo's tokenizer.json (byte-level BPE), <|begin_of_text|> included")
	w4a := fs.String("w4a", model.W4ANone, "none (dequantized weights in float32), fp8 or nvfp4 (W4A-FP8 / W4A-NVFP4 on GPTQ INT4)")
	var sc streamFlags
	sc.register(fs)
	out := fs.String("out", "", "write the logits as little-endian float32 [T, V] to FILE")
	var sf sourceFlags
	sf.register(fs, true, true)
	pos, err := parseFlags(fs, args, 1, "SOURCE")
	if err != nil {
		return err
	}
	if (*tokensFlag == "") == (*textFlag == "") {
		return &usageError{msg: "forward: give --tokens or --text (one of them)"}
	}
	var tokens []int
	if *tokensFlag != "" {
		if tokens, err = parseTokens(*tokensFlag); err != nil {
			return err
		}
	}
	opt, _, err := sc.options(*w4a, stderr)
	if err != nil {
		return err
	}
	m, closer, err := openModel(ctx, pos[0], sf)
	if err != nil {
		return err
	}
	defer closer()
	if err := m.CheckScales(opt); err != nil {
		return err
	}
	if *textFlag != "" {
		if tokens, _, err = encodeText(ctx, m, *textFlag); err != nil {
			return err
		}
	}
	opt.Progress = progressLine(stderr, "forward", "layers")
	logits, err := m.Forward(ctx, tokens, opt)
	var te *model.TokenError
	if errors.As(err, &te) && *textFlag != "" {
		return fmt.Errorf("--text: tokenizer.json gives ids the model's vocabulary lacks: %w", err)
	}
	if errors.As(err, &te) {
		return fmt.Errorf("--tokens %s: %w", *tokensFlag, err)
	}
	if err != nil {
		return err
	}
	if *out != "" {
		if err := writeFloats(*out, logits.Data); err != nil {
			return err
		}
	}
	w := bufio.NewWriterSize(stdout, 1<<20)
	if *asJSON {
		writeLogitsJSON(w, logits)
	} else {
		mode := "dense float32"
		if *w4a == model.W4AFP8 || *w4a == model.W4ANVFP4 {
			mode = "w4a " + *w4a + " (" + w4aNote + ")"
		}
		fmt.Fprintf(w, "logits [%d, %d], %s\n", logits.Rows, logits.Cols, mode)
		for t := range logits.Rows {
			row := logits.Data[t*logits.Cols : (t+1)*logits.Cols]
			best := 0
			for v, x := range row {
				if x > row[best] {
					best = v
				}
			}
			fmt.Fprintf(w, "  position %d: token %d, top next token %d (logit %.4g)\n", t, tokens[t], best, row[best])
		}
	}
	return w.Flush()
}

// writeLogitsJSON writes the logits with each float32's shortest decimal
// form, streamed (a long sequence over a large vocabulary is large).
func writeLogitsJSON(w *bufio.Writer, l kernels.Matrix) {
	fmt.Fprintf(w, `{"shape":[%d,%d],"logits":[`, l.Rows, l.Cols)
	var b []byte
	for t := range l.Rows {
		if t > 0 {
			w.WriteByte(',')
		}
		w.WriteByte('[')
		for v, x := range l.Data[t*l.Cols : (t+1)*l.Cols] {
			b = b[:0]
			if v > 0 {
				b = append(b, ',')
			}
			switch {
			case x != x:
				b = append(b, `"NaN"`...)
			case math.IsInf(float64(x), 0):
				b = strconv.AppendQuote(b, map[bool]string{true: "Infinity", false: "-Infinity"}[x > 0])
			default:
				b = strconv.AppendFloat(b, float64(x), 'g', -1, 32)
			}
			w.Write(b)
		}
		w.WriteByte(']')
	}
	w.WriteString("]}\n")
}

// parseTokens reads IDS: "1,2,3" or "@FILE", ids separated by whitespace or commas.
func parseTokens(spec string) ([]int, error) {
	text, where := spec, "--tokens"
	if strings.HasPrefix(spec, "@") {
		b, err := userfile.Read(spec[1:], calib.MaxDataFile)
		if err != nil {
			return nil, fmt.Errorf("--tokens: %w", err)
		}
		text, where = string(b), spec[1:]
	}
	ids, err := parseIDs(text)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	if len(ids) == 0 {
		return nil, fmt.Errorf("%s: no token ids", where)
	}
	return ids, nil
}

func parseIDs(text string) ([]int, error) { return calib.ParseIDs(text) }

// openModel loads SOURCE's headers and its Llama config.
func openModel(ctx context.Context, source string, sf sourceFlags) (*model.Model, func(), error) {
	c, err := loadStreaming(ctx, source, sf)
	if err != nil {
		return nil, nil, err
	}
	m, err := model.New(c, cpu.New())
	if err != nil {
		c.Close()
		return nil, nil, fmt.Errorf("%s: %w", c.Source.Name(), err)
	}
	return m, func() { c.Close() }, nil
}
