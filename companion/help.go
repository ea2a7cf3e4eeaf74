package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"strings"
)

// helpRequest is `quantscope CMD --help`: not an error, it carries the
// command's usage and flags, printed on stdout with exit status 0.
type helpRequest struct{ text string }

func (h *helpRequest) Error() string { return "help requested" }

// commandHelp is one command's usage line and its flags.
func commandHelp(fs *flag.FlagSet, names string) string {
	var b strings.Builder
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	fmt.Fprintf(&b, "usage: quantscope %s", fs.Name())
	if n > 0 {
		b.WriteString(" [flags]")
	}
	if names != "" && names != "no arguments" {
		fmt.Fprintf(&b, " %s", names)
	}
	b.WriteString("\n")
	if n > 0 {
		b.WriteString("\nflags:\n")
		fs.SetOutput(&b)
		fs.PrintDefaults()
		fs.SetOutput(io.Discard)
	}
	return b.String()
}

// showHelp turns a help request into its text on stdout and no error.
func showHelp(err error, stdout io.Writer) error {
	var hr *helpRequest
	if errors.As(err, &hr) {
		_, werr := io.WriteString(stdout, hr.text)
		return werr
	}
	return err
}

// cmdVersion prints the version line, or with --json its parts.
func cmdVersion(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("version", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, `print {"module","version","vcs","revision","time","modified","go","os","arch"}`)
	if _, err := parseFlags(fs, args, 0, "no arguments"); err != nil {
		return err
	}
	if !*asJSON {
		_, err := fmt.Fprintln(stdout, version())
		return err
	}
	v := map[string]any{"module": "", "version": "", "vcs": "", "revision": "", "time": "", "modified": false,
		"go": runtime.Version(), "os": runtime.GOOS, "arch": runtime.GOARCH}
	if bi, ok := debug.ReadBuildInfo(); ok {
		v["module"], v["version"] = bi.Main.Path, bi.Main.Version
		for _, st := range bi.Settings {
			switch st.Key {
			case "vcs":
				v["vcs"] = st.Value
			case "vcs.revision":
				v["revision"] = st.Value
			case "vcs.time":
				v["time"] = st.Value
			case "vcs.modified":
				v["modified"] = st.Value == "true"
			}
		}
	}
	return json.NewEncoder(stdout).Encode(v)
}

// version is the module version and, when the build recorded them, the VCS
// revision, its time and whether the tree was modified.
func version() string {
	v := "quantscope"
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return v + " (no build information) " + runtime.Version()
	}
	v += " " + bi.Main.Version
	settings := map[string]string{}
	for _, s := range bi.Settings {
		settings[s.Key] = s.Value
	}
	if r := settings["vcs.revision"]; r != "" {
		v += " " + settings["vcs"] + " " + r
		if t := settings["vcs.time"]; t != "" {
			v += " " + t
		}
		if settings["vcs.modified"] == "true" {
			v += " (modified)"
		}
	}
	return v + " " + bi.GoVersion + " " + runtime.GOOS + "/" + runtime.GOARCH
}
