// Package gatewaycli is the gateway command line: config loading, wiring and the commands
// (run, check, hooks list, profiles list, reload, version). cmd/gateway is its main; the
// benchmark (cmd/gateway-bench) runs the same code, so it measures what users run.
package gatewaycli

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
)

// Version is set at build time with -ldflags "-X gateway/cmd/internal/gatewaycli.Version=...".
var Version = "dev"

// Run is the whole CLI with its environment (as os.Environ gives it: "NAME=value") passed
// in, so tests and the benchmark can run it in-process. reload receives SIGHUP's reload
// requests (nil: none). It returns the exit status.
func Run(ctx context.Context, reload <-chan struct{}, args []string, stdout, stderr io.Writer, environ []string) int {
	vars := make(map[string]string, len(environ))
	names := make([]string, 0, len(environ))
	for _, kv := range environ {
		if name, val, ok := strings.Cut(kv, "="); ok {
			vars[name] = val
			names = append(names, name)
		}
	}
	return run(ctx, reload, args, stdout, stderr, func(name string) string { return vars[name] }, names)
}

// run is the whole CLI, with its environment passed in so tests can run it in-process:
// getenv reads a variable, names lists them all (for the misspelt GATEWAY_ ones).
func run(ctx context.Context, reload <-chan struct{}, args []string, stdout, stderr io.Writer, getenv func(string) string, names []string) int {
	root := newRootCmd(ctx, reload, stdout, stderr, getenv, names)
	root.SetArgs(args)
	if err := root.Execute(); err != nil {
		if code, ok := err.(exitCode); ok {
			return int(code)
		}
		fmt.Fprintln(stderr, "gateway:", err)
		return 1
	}
	return 0
}

// exitCode ends the command with a status and no further message (it was already printed).
type exitCode int

func (e exitCode) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

func newRootCmd(ctx context.Context, reload <-chan struct{}, stdout, stderr io.Writer, getenv func(string) string, names []string) *cobra.Command {
	var configPath string
	root := &cobra.Command{
		Use:           "gateway",
		Short:         "Connect an LLM agent to Telegram, Discord, Slack and a local web chat",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.PersistentFlags().StringVarP(&configPath, "config", "c", "", "config file (YAML); default: ./gateway.yaml if present, else built-in defaults")
	root.SetOut(stdout)
	root.SetErr(stderr)
	path := func() string { return resolveConfigPath(configPath, getenv) }

	runCmd := &cobra.Command{
		Use:   "run",
		Short: "Run the gateway (the default command)",
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runGateway(ctx, path(), reload, stderr, getenv, names)
		},
	}
	root.RunE = runCmd.RunE
	var connect bool
	checkCmd := &cobra.Command{
		Use:   "check",
		Short: "Validate the config the way run would, print it with secrets masked",
		Long: "Validate the config the way run would and print it with secrets masked. Nothing is started " +
			"and no service is called (the cluster's engines excepted): MCP servers are checked as written " +
			"(the command exists and may be run, the url is well-formed); --connect also reaches each one " +
			"(starting a stdio server's command) and lists its tools.",
		RunE: func(cmd *cobra.Command, _ []string) error {
			return checkConfig(ctx, path(), stdout, getenv, names, connect)
		},
	}
	checkCmd.Flags().BoolVar(&connect, "connect", false, "also reach each MCP server (starting stdio ones) and list its tools")
	root.AddCommand(runCmd,
		checkCmd,
		&cobra.Command{
			Use:   "version",
			Short: "Print the version",
			Run:   func(cmd *cobra.Command, _ []string) { fmt.Fprintln(stdout, "gateway", Version) },
		},
		newHooksCmd(path, stdout, getenv),
		newProfilesCmd(path, stdout, getenv),
		newReloadCmd(ctx, path, stdout, getenv),
		newSendCmd(ctx, path, stdout, getenv),
	)
	for _, c := range root.Commands() {
		refuseArgs(c)
	}
	return root
}

// refuseArgs makes cmd and its subcommands refuse arguments they do not take. Cobra
// otherwise ignores them: `gateway check prod.yaml` checked the built-in defaults and said
// "config OK", and `gateway run prod.yaml` ran them, the file never read.
func refuseArgs(cmd *cobra.Command) {
	for _, c := range cmd.Commands() {
		refuseArgs(c)
	}
	if cmd.Args != nil {
		return // it says what it takes
	}
	if !cmd.Runnable() {
		// A group (hooks, profiles): a misspelt subcommand is an error, not its help.
		cmd.RunE = func(c *cobra.Command, args []string) error {
			if len(args) > 0 {
				return fmt.Errorf("unknown command %q for %q (see %s --help)", args[0], c.CommandPath(), c.CommandPath())
			}
			return c.Help()
		}
		return
	}
	cmd.Args = func(c *cobra.Command, args []string) error {
		if len(args) == 0 {
			return nil
		}
		hint := "a config file is given as --config FILE"
		if ext := filepath.Ext(args[0]); len(args) == 1 && (ext == ".yaml" || ext == ".yml") {
			hint = "did you mean --config " + args[0] + "?"
		}
		return fmt.Errorf("%s takes no arguments, got %q (%s)", c.CommandPath(), strings.Join(args, " "), hint)
	}
}

// resolveConfigPath picks --config, else $GATEWAY_CONFIG, else ./gateway.yaml when it exists.
func resolveConfigPath(flag string, getenv func(string) string) string {
	if flag != "" {
		return flag
	}
	if p := getenv("GATEWAY_CONFIG"); p != "" {
		return p
	}
	if _, err := os.Stat("gateway.yaml"); err == nil {
		return "gateway.yaml"
	}
	return ""
}
