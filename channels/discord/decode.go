package discord

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/bwmarrin/discordgo"
)

// decodeMessage reads MESSAGE_CREATE data. discordgo v0.29.0 fails on a component type it
// does not know (Discord adds them: a forward of a bot's layout message carries them in
// its snapshot), and its failure leaves the message half read, often without id or
// author, so it would be dropped in silence. We decode the raw event ourselves and, when
// that fails, drop the components discordgo cannot read and decode again.
func decodeMessage(raw []byte) (*discordgo.Message, error) {
	var m discordgo.Message
	err := json.Unmarshal(raw, &m)
	if err == nil {
		return &m, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var tree any
	if dec.Decode(&tree) != nil {
		return nil, err
	}
	cleaned, merr := json.Marshal(dropUnknownComponents(tree))
	if merr != nil {
		return nil, err
	}
	m = discordgo.Message{}
	if json.Unmarshal(cleaned, &m) == nil {
		return &m, nil
	}
	// Still unreadable: keep what routes and answers it, so that the user hears back.
	var head struct {
		ID               string                      `json:"id"`
		ChannelID        string                      `json:"channel_id"`
		GuildID          string                      `json:"guild_id"`
		Type             discordgo.MessageType       `json:"type"`
		Content          string                      `json:"content"`
		Author           *discordgo.User             `json:"author"`
		Mentions         []*discordgo.User           `json:"mentions"`
		MentionRoles     []string                    `json:"mention_roles"`
		MessageReference *discordgo.MessageReference `json:"message_reference"`
		WebhookID        string                      `json:"webhook_id"`
	}
	if herr := json.Unmarshal(raw, &head); herr != nil || head.ID == "" || head.Author == nil {
		return nil, fmt.Errorf("%w (and without unknown components: %v)", err, herr)
	}
	return &discordgo.Message{ID: head.ID, ChannelID: head.ChannelID, GuildID: head.GuildID, Type: head.Type,
		Content: head.Content, Author: head.Author, Mentions: head.Mentions, MentionRoles: head.MentionRoles,
		MessageReference: head.MessageReference, WebhookID: head.WebhookID}, nil
}

// dropUnknownComponents removes, anywhere in v, components of a type discordgo cannot decode.
func dropUnknownComponents(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			switch {
			case k == "components":
				if list, ok := e.([]any); ok {
					kept := list[:0]
					for _, c := range list {
						if knownComponent(c) {
							kept = append(kept, dropUnknownComponents(c))
						}
					}
					x[k] = kept
				}
			case k == "accessory" && !knownComponent(e):
				delete(x, k)
			default:
				x[k] = dropUnknownComponents(e)
			}
		}
	case []any:
		for i, e := range x {
			x[i] = dropUnknownComponents(e)
		}
	}
	return v
}

func knownComponent(v any) bool {
	m, ok := v.(map[string]any)
	if !ok {
		return false
	}
	n, ok := m["type"].(json.Number)
	if !ok {
		return false
	}
	t, err := n.Int64()
	if err != nil {
		return false
	}
	b, err := json.Marshal(map[string]any{"type": t})
	if err != nil {
		return false
	}
	_, err = discordgo.MessageComponentFromJSON(b)
	return err == nil
}
