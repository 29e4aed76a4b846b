package gatewaycli

import (
	"fmt"
	"net/url"
	"path/filepath"
	"strings"

	"gateway/gateway"
	"gateway/harness"
	"gateway/profiles"
)

// apiKeyWarnings names each llm section whose requests would go without an API key to an API
// that refuses them: anthropic at any address, openai at OpenAI's own (another
// OpenAI-compatible server, a local Ollama, takes requests without one). Each profile's
// section is taken as its chats run it (gateway.ProfileLLM): the global one is named once,
// with the profiles that use it, and a profile that does not get the global key (another
// provider, a base_url of its own) is named on its own. A warning, not a refusal: a proxy at
// base_url may add the key itself. It names keys and files, never a value.
func apiKeyWarnings(cfg Config, cfgPath string, set *profiles.Set) []string {
	var users, out []string // users: the profiles whose missing key is the global one
	for _, name := range set.Names() {
		p := set.Get(name)
		llm := gateway.ProfileLLM(cfg.LLM, p)
		refusal := keylessRefusal(llm)
		if llm.APIKey.IsSet() || refusal == "" {
			continue
		}
		if llm.Provider == cfg.LLM.Provider && llm.BaseURL == cfg.LLM.BaseURL {
			users = append(users, name)
			continue
		}
		why := "and there is no global llm.api_key"
		switch {
		case cfg.LLM.APIKey.IsSet() && llm.Provider != cfg.LLM.Provider:
			why = "and the global llm.api_key is not sent to a profile with another llm.provider"
		case cfg.LLM.APIKey.IsSet():
			why = "and the global llm.api_key is not sent to a profile with an llm.base_url of its own"
		}
		file := "its profile.yaml"
		if p.Dir != "" {
			file = filepath.Join(p.Dir, "profile.yaml")
		}
		out = append(out, fmt.Sprintf("profile %s: llm.api_key is not set: %s. The profile has no llm.api_key of its own, %s. Set llm.api_key in %s, e.g. api_key: %q",
			name, refusal, why, file, "${"+keyVariable(llm.Provider)+"}"))
	}
	if len(users) > 0 {
		file := cfgPath
		if file == "" {
			file = "a config file (--config)"
		}
		global := fmt.Sprintf("llm.api_key is not set: %s (profiles using it: %s). Set llm.api_key in %s, e.g. api_key: %q, or the variable %s",
			keylessRefusal(cfg.LLM), strings.Join(users, ", "), file, "${"+keyVariable(cfg.LLM.Provider)+"}", envKey("llm.api_key"))
		out = append([]string{global}, out...)
	}
	return out
}

// keylessRefusal says what becomes of a request of llm sent with no key, when its API
// refuses it; "" for one that may well take it (echo, fake, an OpenAI-compatible server
// other than OpenAI's).
func keylessRefusal(llm harness.Config) string {
	switch strings.ToLower(strings.TrimSpace(llm.Provider)) {
	case "anthropic":
		if llm.BaseURL == "" || hostIs(llm.BaseURL, "api.anthropic.com") {
			return "every request to Anthropic goes without a key, and Anthropic's API refuses it"
		}
		// The address is not shown: it may carry credentials.
		return "every request to the Anthropic API at llm.base_url goes without a key"
	case "openai":
		if llm.BaseURL == "" || isOpenAIEndpoint(llm.BaseURL) {
			return "every request to OpenAI goes without a key, and OpenAI's API refuses it"
		}
	}
	return ""
}

// keyVariable is the environment variable a provider's key is usually kept in.
func keyVariable(provider string) string {
	if strings.EqualFold(strings.TrimSpace(provider), "anthropic") {
		return "ANTHROPIC_API_KEY"
	}
	return "OPENAI_API_KEY"
}

// hostIs reports whether the URL raw is on host.
func hostIs(raw, host string) bool {
	u, err := url.Parse(raw)
	return err == nil && strings.EqualFold(u.Hostname(), host)
}
