package childproc

import "os"

// BaseEnv is the part of the gateway's environment every program it starts gets, plus the
// variables named in extra that are set: locale, home and search path, never the
// gateway's own tokens and API keys, which reach a program only when the admin lists them.
func BaseEnv(extra ...string) []string {
	var env []string
	for _, names := range [][]string{
		{"PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR"},
		extra,
	} {
		for _, n := range names {
			if v, ok := os.LookupEnv(n); ok {
				env = append(env, n+"="+v)
			}
		}
	}
	return env
}
