package gatewaycli

import (
	"fmt"
	"path/filepath"
	"slices"

	"gateway/profiles"
)

// voiceWarnings names each profile that asks for spoken answers (tts.mode inbound or always)
// while tts.mode in gateway.yaml is off: the text-to-speech hook is then not loaded at all, so
// the profile's chats are answered in text only and /voice says voice is not set up. Without
// this the admin's setting was silently without effect.
func voiceWarnings(cfg Config, cfgPath string, set *profiles.Set) []string {
	if cfg.TTS.Mode != "off" {
		return nil
	}
	file := cfgPath
	if file == "" {
		file = "the config file"
	}
	var out []string
	for _, name := range set.Names() {
		p := set.Get(name)
		if p.TTSMode != "inbound" && p.TTSMode != "always" {
			continue
		}
		where := "its profile.yaml"
		if p.Dir != "" {
			where = filepath.Join(p.Dir, "profile.yaml")
		}
		out = append(out, fmt.Sprintf("profile %s: tts.mode is %s in %s, but tts.mode is off in %s, so no answer is spoken. "+
			"Set tts (its provider, and mode: inbound) in %s; a profile can still turn voice off with tts.mode: off",
			name, p.TTSMode, where, file, file))
	}
	return out
}

// configWarnings are the config's mistakes that do not stop the gateway (a profile's
// missing key, its voice that cannot be, a hook folder that is not there): check, the
// start and a reload tell the same ones.
func configWarnings(cfg Config, cfgPath string, set *profiles.Set) []string {
	return slices.Concat(apiKeyWarnings(cfg, cfgPath, set), voiceWarnings(cfg, cfgPath, set), hookDirWarnings(cfg))
}
