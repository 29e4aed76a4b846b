//go:build tools

// Package deps pins the chosen dependencies while the packages that use them are being
// written, so that `go mod tidy` keeps them. Remove an entry once real code imports it.
package deps

import (
	_ "github.com/anthropics/anthropic-sdk-go"
	_ "github.com/bwmarrin/discordgo"
	_ "github.com/chromedp/chromedp"
	_ "github.com/coder/websocket"
	_ "github.com/go-telegram/bot"
	_ "github.com/go-viper/mapstructure/v2"
	_ "github.com/gorilla/websocket"
	_ "github.com/lmittmann/tint"
	_ "github.com/openai/openai-go/v3"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "github.com/slack-go/slack"
	_ "github.com/spf13/cobra"
	_ "github.com/spf13/viper"
	_ "github.com/yuin/goldmark"
	_ "golang.org/x/time/rate"
	_ "gopkg.in/yaml.v3"
)
