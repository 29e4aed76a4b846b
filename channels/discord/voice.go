package discord

import (
	"bytes"
	"context"
	"encoding/base64"
	"os"
	"time"

	"github.com/bwmarrin/discordgo"

	"gateway/channels"
	"gateway/internal/audio"
)

const (
	voiceName    = "voice-message.ogg"
	voiceTimeout = 30 * time.Second // probing and converting one voice note
	maxWaveform  = 256              // samples Discord accepts
)

type voiceAttachment struct {
	ID           string  `json:"id"`
	Filename     string  `json:"filename"`
	DurationSecs float64 `json:"duration_secs"`
	Waveform     string  `json:"waveform"` // base64 of one byte (0-255) per sample
}

type voicePayload struct {
	Flags            discordgo.MessageFlags            `json:"flags"`
	Attachments      []voiceAttachment                 `json:"attachments"`
	MessageReference *discordgo.MessageReference       `json:"message_reference,omitempty"`
	AllowedMentions  *discordgo.MessageAllowedMentions `json:"allowed_mentions,omitempty"`
	Nonce            string                            `json:"nonce,omitempty"`
	EnforceNonce     bool                              `json:"enforce_nonce,omitempty"`
}

// sendVoice posts an audio part as a native voice message: Ogg/Opus in a multipart body
// with flags IS_VOICE_MESSAGE and attachments[0].duration_secs and waveform, which
// discordgo's MessageSend cannot express. Audio that is not Ogg is converted first; if
// that fails it goes out as a plain file rather than not at all.
func (c *Channel) sendVoice(ctx context.Context, dest string, p channels.Part, ref *discordgo.MessageReference, nonce string) error {
	data, err := partBytes(p)
	if err != nil {
		return err
	}
	vctx, cancel := context.WithTimeout(ctx, voiceTimeout)
	defer cancel()
	path, cleanup, err := c.partFile(p, data)
	if err != nil {
		return err
	}
	defer cleanup()
	if !isOgg(p.MIME) {
		ogg, err := c.toOgg(vctx, path)
		if err != nil {
			c.log.Warn("discord: could not convert audio to a voice message; sending it as a file", "mime", p.MIME, "err", err)
			return c.sendFile(ctx, dest, p, ref, nonce)
		}
		data, p.Duration = ogg, 0
		if path, cleanup, err = c.partFile(channels.Part{}, data); err != nil {
			return err
		}
		defer cleanup()
	}
	secs, wave := c.voiceMeta(vctx, path, p.Duration, int64(len(data)))
	payload := voicePayload{
		Flags:            discordgo.MessageFlagsIsVoiceMessage,
		Attachments:      []voiceAttachment{{ID: "0", Filename: voiceName, DurationSecs: secs, Waveform: base64.StdEncoding.EncodeToString(wave)}},
		MessageReference: ref,
		AllowedMentions:  noPings(),
		Nonce:            nonce,
		EnforceNonce:     nonce != "",
	}
	endpoint := discordgo.EndpointChannelMessages(dest)
	return c.call(ctx, dest, "send a voice message", func(ctx context.Context) error {
		ct, body, err := discordgo.MultipartBodyWithJSON(payload, []*discordgo.File{{Name: voiceName, ContentType: "audio/ogg", Reader: bytes.NewReader(data)}})
		if err != nil {
			return err
		}
		_, err = c.s.RequestRaw("POST", endpoint, ct, body, endpoint, 0, discordgo.WithContext(ctx))
		return err
	})
}

// partFile gives ffmpeg a file to read: the part's own, or data written to a temp file.
func (c *Channel) partFile(p channels.Part, data []byte) (string, func(), error) {
	if p.Data == nil && p.Path != "" {
		return p.Path, func() {}, nil
	}
	if err := os.MkdirAll(c.mediaDir, 0o700); err != nil {
		return "", nil, err
	}
	f, err := os.CreateTemp(c.mediaDir, ".voice-*")
	if err != nil {
		return "", nil, err
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(f.Name())
		return "", nil, err
	}
	return f.Name(), func() { _ = os.Remove(f.Name()) }, nil
}

func (c *Channel) toOgg(ctx context.Context, in string) ([]byte, error) {
	out := in + ".ogg"
	defer os.Remove(out)
	if err := audio.ToOggOpus(ctx, in, out); err != nil {
		return nil, err
	}
	return os.ReadFile(out)
}

// voiceMeta returns the duration and waveform Discord shows. The duration comes from the
// part when known, else from ffprobe, else from the size at a typical 32 kbit/s; the
// waveform from the decoded audio (one sample per 100 ms, up to 256), else a flat line.
func (c *Channel) voiceMeta(ctx context.Context, path string, secs float64, size int64) (float64, []byte) {
	if secs <= 0 {
		if info, err := audio.Probe(ctx, path); err == nil && info.Duration > 0 {
			secs = info.Duration.Seconds()
		}
	}
	if secs <= 0 {
		secs = max(float64(size*8)/32_000, 1)
	}
	n := min(max(int(secs*10), 1), maxWaveform)
	wave, err := audio.Waveform(ctx, path, n)
	if err != nil || len(wave) == 0 {
		c.log.Debug("discord: no waveform for a voice message; sending a flat one", "err", err)
		wave = bytes.Repeat([]byte{128}, n)
	}
	return secs, wave
}
