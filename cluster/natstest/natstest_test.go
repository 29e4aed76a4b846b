package natstest_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"gateway/cluster/natstest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// A restart keeps the URL and JetStream's state: a client reconnects by itself and finds
// the stream and its message.
func TestRestartKeepsTheStreamAndTheURL(t *testing.T) {
	t.Run("embedded", func(t *testing.T) { restartKeeps(t, natstest.New(t)) })
	t.Run("process", func(t *testing.T) { restartKeeps(t, natstest.NewProcess(t)) })
}

func restartKeeps(t *testing.T, s interface {
	URL() string
	Restart(time.Duration)
}) {
	url := s.URL()
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "KEEP", Subjects: []string{"keep.>"}, Storage: jetstream.FileStorage}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "keep.1", []byte("hello")); err != nil {
		t.Fatal(err)
	}
	s.Restart(200 * time.Millisecond)
	if s.URL() != url {
		t.Fatalf("URL after the restart %s; want %s", s.URL(), url)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, err := js.Stream(ctx, "KEEP")
		if err == nil {
			msg, err := st.GetMsg(ctx, 1)
			if err != nil || string(msg.Data) != "hello" {
				t.Fatalf("after the restart: %v %v", msg, err)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the stream is not back 30s after the restart: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
