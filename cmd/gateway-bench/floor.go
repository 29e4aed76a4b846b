package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/go-telegram/bot"
	"github.com/go-telegram/bot/models"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.yaml.in/yaml/v3"
	"golang.org/x/time/rate"
)

type config struct {
	HTTP struct {
		Listen string `yaml:"listen"`
	} `yaml:"http"`
	LLM struct {
		Provider string `yaml:"provider"`
		Model    string `yaml:"model"`
		BaseURL  string `yaml:"base_url"`
		APIKey   string `yaml:"api_key"`
	} `yaml:"llm"`
	Channels struct {
		Telegram struct {
			Token  string `yaml:"token"`
			APIURL string `yaml:"api_url"`
		} `yaml:"telegram"`
	} `yaml:"channels"`
}

// floorArg, first on gateway-bench's command line, makes it the floor child (--floor).
const floorArg = "floor-child"

// runFloor is the yardstick for the CPU and memory figures (--floor): the least a Telegram
// bot built on the gateway's SDKs does for a message. It takes the update, asks the model
// when the config names an OpenAI-style one, and sends the answer within Telegram's limits
// (so no 429s, as the gateway). It keeps no journal and no history, runs no hooks, and
// streams no preview. It reads the config the fixture writes for the gateway (args: run
// --config FILE) and serves /readyz and /metrics, so one driver measures both in one
// sitting, and the difference is what the gateway's promises cost.
func runFloor(ctx context.Context, args []string, stderr io.Writer) error {
	if len(args) != 3 || args[0] != "run" || args[1] != "--config" {
		return errors.New("usage: gateway-bench " + floorArg + " run --config FILE")
	}
	raw, err := os.ReadFile(args[2])
	if err != nil {
		return err
	}
	var cfg config
	if err := yaml.Unmarshal(raw, &cfg); err != nil {
		return err
	}
	answer := func(_ context.Context, text string) (string, error) { return text, nil }
	if cfg.LLM.Provider == "openai" {
		client := openai.NewClient(option.WithBaseURL(cfg.LLM.BaseURL), option.WithAPIKey(cfg.LLM.APIKey),
			option.WithRequestTimeout(time.Minute))
		answer = func(ctx context.Context, text string) (string, error) {
			s := client.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{
				Model:    cfg.LLM.Model,
				Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(text)},
			})
			defer s.Close()
			var acc openai.ChatCompletionAccumulator
			for s.Next() {
				acc.AddChunk(s.Current())
			}
			if err := s.Err(); err != nil {
				return "", err
			}
			if len(acc.Choices) == 0 {
				return "", errors.New("no answer")
			}
			return acc.Choices[0].Message.Content, nil
		}
	}
	// Telegram's limits, as any bot that wants no 429s keeps them: 30 sends a second for
	// the bot, one a second for a private chat.
	bot30 := rate.NewLimiter(30, 5)
	var mu sync.Mutex
	perChat := map[int64]*rate.Limiter{}
	pace := func(ctx context.Context, chat int64) error {
		mu.Lock()
		l := perChat[chat]
		if l == nil {
			l = rate.NewLimiter(1, 1)
			perChat[chat] = l
		}
		mu.Unlock()
		if err := l.Wait(ctx); err != nil {
			return err
		}
		return bot30.Wait(ctx)
	}
	onMessage := func(ctx context.Context, b *bot.Bot, u *models.Update) {
		if u.Message == nil {
			return
		}
		ctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		text, err := answer(ctx, u.Message.Text)
		if err != nil {
			fmt.Fprintln(stderr, "floor: model:", err)
			return
		}
		if err := pace(ctx, u.Message.Chat.ID); err != nil {
			return
		}
		if _, err := b.SendMessage(ctx, &bot.SendMessageParams{ChatID: u.Message.Chat.ID, Text: text}); err != nil {
			fmt.Fprintln(stderr, "floor: send:", err)
		}
	}
	b, err := bot.New(cfg.Channels.Telegram.Token, bot.WithServerURL(cfg.Channels.Telegram.APIURL),
		bot.WithSkipGetMe(), bot.WithDefaultHandler(onMessage))
	if err != nil {
		return err
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector())
	mux := http.NewServeMux()
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := &http.Server{Addr: cfg.HTTP.Listen, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.ListenAndServe() }()

	b.Start(ctx) // returns when ctx is done
	shut, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return srv.Shutdown(shut)
}
