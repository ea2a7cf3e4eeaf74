// Command quantscope shows what is inside a quantized LLM checkpoint.
//
//	quantscope inspect [--json] [--endpoint URL] [--revision REV] [--token T] SOURCE
//	quantscope decode  [--json] [--rows A:B] [--out FILE] [--index-shards] [--endpoint URL] SOURCE NAME
//	quantscope stats   [--json] [--bins N] [--backend cpu|cuda] [--index-shards] [--endpoint URL] SOURCE MODULE
//	quantscope diff    [--json] [--endpoint URL] [--token T] SOURCE_A SOURCE_B
//	quantscope fit     [--json] [--tp N] [--context T] [--batch B] [--gpu NAME[:GB]]... [--mtp] [--w4a fp8|nvfp4] [--reserve R] SOURCE
//	quantscope serve   [--addr 127.0.0.1:8080] [--demo] [--hub DIR] [--allow-origin URL]... [--out-dir DIR] [--in-dir DIR]
//	quantscope hub     [--addr 127.0.0.1:8090] [--allow-origin URL]... DIR
//	quantscope forward [--json] --tokens IDS [--w4a none|fp8|nvfp4] [--attention fp8] [--recipe R] [--scales FILE] [--out FILE] SOURCE
//	quantscope eval    [--json] --data FILE [--w4a none|fp8|nvfp4] [--attention fp8] [--recipe R] [--scales FILE] [--allow-overlap] [--compare] SOURCE
//	quantscope calibrate --pass P --data FILE [--w4a fp8|nvfp4] [--attention fp8] [--recipe R] [--json] [--out FILE] SOURCE
//
// Bad input of any kind exits with status 1 and one line `error: ...` on
// stderr naming the file, the tensor and the rule; nothing partial is printed
// on stdout.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"regexp"
	"runtime/debug"
	"strings"
)

const usage = `quantscope: what is really inside a quantized checkpoint

usage:
  quantscope inspect [--json] [--endpoint URL] [--revision REV] [--token T] SOURCE
  quantscope decode  [--json] [--rows A:B] [--out FILE] [--index-shards] [--endpoint URL] SOURCE NAME
  quantscope stats   [--json] [--bins N] [--backend cpu|cuda] [--index-shards] [--endpoint URL] SOURCE MODULE
  quantscope diff    [--json] [--endpoint URL] [--token T] SOURCE_A SOURCE_B
  quantscope fit     [--json] [--tp N] [--context T] [--batch B] [--gpu NAME[:GB]]... [--mtp]
                     [--w4a fp8|nvfp4] [--kv-dtype D] [--reserve 0.1|10%|6GB] SOURCE
                     memory to serve SOURCE, and on which GPUs it fits
  quantscope serve   [--addr 127.0.0.1:8080] [--demo] [--hub DIR] [--allow-origin URL]... [--out-dir DIR] [--in-dir DIR]
                     prints the page's URL with a per-launch token; /ws is the companion
  quantscope hub     [--addr 127.0.0.1:8090] [--allow-origin URL]... DIR
  quantscope demo    DIR        write the generated demo repos under DIR
  quantscope forward [--json] --tokens IDS [--w4a none|fp8|nvfp4] [--attention fp8] [--recipe R]
                     [--scales FILE] [--out FILE] SOURCE
                     Llama logits of one sequence (IDS: 1,2,3 or @FILE)
                     --text TEXT instead of --tokens: tokenized with the repo's tokenizer.json
  quantscope eval    [--json] --data FILE [--w4a none|fp8|nvfp4] [--attention fp8] [--recipe R]
                     [--scales FILE [--allow-overlap]] [--compare] SOURCE
                     perplexity over FILE's token id lines; --compare: dense and W4A side by side
                     --text FILE instead of --data: text lines, tokenized with the repo's tokenizer.json
  quantscope calibrate --pass weight_max|act_max|percentile|headroom|awq_lite|local_hessian
                     --data FILE [--w4a fp8|nvfp4] [--attention fp8] [--recipe R] [--json] [--out FILE] SOURCE
                     act_max --w4a nvfp4: GPT-QModel's producer_maximum report (forward --scales)
  quantscope quantize --format nvfp4|fp8_e4m3|fp8_e5m2 [--recipe max|mse|four_six|least_squares|local_hessian]
                      [--scale tensor|row|block] [--block R,C] [--naming modelopt|compressed-tensors|gptqmodel]
                      [--data FILE] --out FILE SOURCE MODULE
        FILE of --data: raw little-endian float32 [tokens, in] activations (local_hessian);
        calibrate's FILE.json beside it names their module, and another module refuses them
  quantscope report  [--json] [--format nvfp4] [--data FILE] SOURCE MODULE
  quantscope version [--json]   the module version and VCS revision (also --version)
  quantscope CMD --help         CMD's flags

SOURCE: https://huggingface.co/ORG/NAME[/tree/REV], ORG/NAME, the URL of one
.safetensors file, a local directory or a local .safetensors file.
`

// usageError is a mistake on the command line. Like every error it is one
// line on stderr (DESIGN.md's contract); that line ends by saying where the
// usage is: the command's --help when the mistake was made in one, else the
// program's.
type usageError struct{ msg, cmd string }

func (e *usageError) Error() string { return e.msg }

// line is the error's one line, with the pointer to the usage.
func (e *usageError) line() string {
	if e.cmd == "" {
		return e.msg + " (quantscope --help lists the commands)"
	}
	return fmt.Sprintf("%s (quantscope %s --help lists its flags)", e.msg, e.cmd)
}

func main() {
	// An inventory's run is short and its garbage is mostly header strings:
	// trade memory for fewer collections, within a bound. The streamed
	// commands keep the default, which holds them to their working set.
	if len(os.Args) > 1 && (os.Args[1] == "inspect" || os.Args[1] == "diff" || os.Args[1] == "fit") {
		debug.SetGCPercent(400)
	}
	debug.SetMemoryLimit(4 << 30)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	context.AfterFunc(ctx, stop) // a second Ctrl-C ends a command that does not stop at the first
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	interrupted := ctx.Err() != nil // before stop, which cancels ctx too
	stop()
	if err != nil && interrupted {
		// Ctrl-C cut the command short: say so once, as a shell does
		// (128 + SIGINT), not each read's "context canceled"
		fmt.Fprintln(os.Stderr, "interrupted")
		os.Exit(130)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "error: "+oneLine(errorLine(err)))
		os.Exit(1)
	}
}

// errorLine is what main prints of err after "error: ".
func errorLine(err error) string {
	var ue *usageError
	if errors.As(err, &ue) {
		return ue.line()
	}
	return err.Error()
}

// oneLine folds a joined or wrapped error onto one line.
func oneLine(s string) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(s, "\n", "; ")), " ")
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) (err error) {
	defer func() { err = showHelp(err, stdout) }()
	if len(args) == 0 {
		return &usageError{msg: "no command given"}
	}
	cmd, rest := args[0], args[1:]
	defer func() {
		// A mistake in a known command points at that command's help.
		var ue *usageError
		if errors.As(err, &ue) && ue.cmd == "" && !strings.HasPrefix(ue.msg, "unknown command") {
			ue.cmd = cmd
		}
	}()
	switch cmd {
	case "inspect":
		return cmdInspect(ctx, rest, stdout)
	case "decode":
		return cmdDecode(ctx, rest, stdout)
	case "fit":
		return cmdFit(ctx, rest, stdout)
	case "diff":
		return cmdDiff(ctx, rest, stdout)
	case "stats":
		return cmdStats(ctx, rest, stdout, stderr)
	case "serve":
		return cmdServe(ctx, rest, stdout, stderr)
	case "hub":
		return cmdHub(ctx, rest, stdout, stderr)
	case "demo":
		return cmdDemo(ctx, rest, stdout)
	case "forward":
		return cmdForward(ctx, rest, stdout, stderr)
	case "eval":
		return cmdEval(ctx, rest, stdout, stderr)
	case "calibrate":
		return cmdCalibrate(ctx, rest, stdout, stderr)
	case "quantize":
		return cmdQuantize(ctx, rest, stdout, stderr)
	case "report":
		return cmdReport(ctx, rest, stdout, stderr)
	case "help", "-h", "--help":
		if len(rest) == 1 && rest[0] != "help" {
			return run(ctx, []string{rest[0], "--help"}, stdout, stderr)
		}
		fmt.Fprint(stdout, usage)
		return nil
	case "version", "--version":
		return cmdVersion(rest, stdout)
	}
	return &usageError{msg: fmt.Sprintf("unknown command %q", cmd)}
}

// flagError is the flag package's error, less its own wrapping where the
// flag's value already said what is wrong with it and named the flag
// (`invalid value "X" for flag -gpu: --gpu "X": …`).
func flagError(err error) string {
	msg := err.Error()
	if m := wrappedFlagValue.FindStringSubmatchIndex(msg); m != nil && strings.HasPrefix(msg[m[1]:], "--"+msg[m[2]:m[3]]+" ") {
		return msg[m[1]:]
	}
	return msg
}

var wrappedFlagValue = regexp.MustCompile(`^invalid value ".*" for flag -([\w-]+): `)

// parseFlags parses flags that may come before or after the positional
// arguments, and checks the positional count.
func parseFlags(fs *flag.FlagSet, args []string, positional int, names string) ([]string, error) {
	fs.SetOutput(io.Discard)
	var pos []string
	for {
		if err := fs.Parse(args); errors.Is(err, flag.ErrHelp) {
			return nil, &helpRequest{commandHelp(fs, names)}
		} else if err != nil {
			return nil, &usageError{fmt.Sprintf("%s: %s", fs.Name(), flagError(err)), fs.Name()}
		}
		args = fs.Args()
		if len(args) == 0 {
			break
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
	if len(pos) != positional {
		return nil, &usageError{fmt.Sprintf("%s wants %s, got %d argument(s)", fs.Name(), names, len(pos)), fs.Name()}
	}
	return pos, nil
}
