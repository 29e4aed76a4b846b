package telegram

import "github.com/go-telegram/bot/models"

// update and message are what the adapter reads of a Telegram update: the SDK's
// models.Update, with the fields it does not read left out and those it only tests for
// presence (service messages, kinds it describes without their content) reduced to
// present. Decoding into models.Message made encoding/json build its encoders for every
// type the SDK's Message reaches, 388 KB of live heap for the life of the process, a tenth
// of the gateway's private memory at ready (docs/bench.md, seventh pass). Field names and
// JSON keys are the SDK's.
type update struct {
	ID      int64    `json:"update_id"`
	Message *message `json:"message,omitempty"`
}

// present stands for a field whose content the adapter does not read: non-nil when the
// update carried it.
type present struct{}

type message struct {
	ID              int                    `json:"message_id"`
	MessageThreadID int                    `json:"message_thread_id,omitempty"`
	From            *models.User           `json:"from,omitempty"`
	SenderChat      *models.Chat           `json:"sender_chat,omitempty"` // an anonymous admin's group, a channel's post
	Date            int                    `json:"date"`
	Chat            models.Chat            `json:"chat"`
	IsTopicMessage  bool                   `json:"is_topic_message,omitempty"`
	ReplyToMessage  *message               `json:"reply_to_message,omitempty"`
	MediaGroupID    string                 `json:"media_group_id,omitempty"`
	Text            string                 `json:"text,omitempty"`
	Entities        []models.MessageEntity `json:"entities,omitempty"`
	Caption         string                 `json:"caption,omitempty"`
	CaptionEntities []models.MessageEntity `json:"caption_entities,omitempty"`

	// What a person sends: files fetched later, the rest described in words (attachments).
	Voice       *models.Voice      `json:"voice,omitempty"`
	Audio       *models.Audio      `json:"audio,omitempty"`
	VideoNote   *models.VideoNote  `json:"video_note,omitempty"`
	Photo       []models.PhotoSize `json:"photo,omitempty"`
	Document    *models.Document   `json:"document,omitempty"`
	Sticker     *models.Sticker    `json:"sticker,omitempty"`
	Dice        *models.Dice       `json:"dice,omitempty"`
	Video       *models.Video      `json:"video,omitempty"`
	Venue       *models.Venue      `json:"venue,omitempty"`
	Location    *models.Location   `json:"location,omitempty"`
	Contact     *models.Contact    `json:"contact,omitempty"`
	Poll        *pollInfo          `json:"poll,omitempty"`
	Checklist   *checklistInfo     `json:"checklist,omitempty"`
	Game        *titled            `json:"game,omitempty"`
	Invoice     *titled            `json:"invoice,omitempty"`
	WebAppData  *models.WebAppData `json:"web_app_data,omitempty"`
	Animation   *present           `json:"animation,omitempty"`
	Story       *present           `json:"story,omitempty"`
	PaidMedia   *present           `json:"paid_media,omitempty"`
	Giveaway    *present           `json:"giveaway,omitempty"`
	UsersShared *present           `json:"users_shared,omitempty"`
	ChatShared  *present           `json:"chat_shared,omitempty"`

	// Service messages: what Telegram says about the chat (isService).
	NewChatMembers                []present `json:"new_chat_members,omitempty"`
	LeftChatMember                *present  `json:"left_chat_member,omitempty"`
	NewChatTitle                  string    `json:"new_chat_title,omitempty"`
	NewChatPhoto                  []present `json:"new_chat_photo,omitempty"`
	DeleteChatPhoto               bool      `json:"delete_chat_photo,omitempty"`
	GroupChatCreated              bool      `json:"group_chat_created,omitempty"`
	SupergroupChatCreated         bool      `json:"supergroup_chat_created,omitempty"`
	ChannelChatCreated            bool      `json:"channel_chat_created,omitempty"`
	MessageAutoDeleteTimerChanged *present  `json:"message_auto_delete_timer_changed,omitempty"`
	MigrateToChatID               int64     `json:"migrate_to_chat_id,omitempty"`
	MigrateFromChatID             int64     `json:"migrate_from_chat_id,omitempty"`
	PinnedMessage                 *present  `json:"pinned_message,omitempty"`
	SuccessfulPayment             *present  `json:"successful_payment,omitempty"`
	RefundedPayment               *present  `json:"refunded_payment,omitempty"`
	Gift                          *present  `json:"gift,omitempty"`
	UniqueGift                    *present  `json:"unique_gift,omitempty"`
	GiftUpgradeSent               *present  `json:"gift_upgrade_sent,omitempty"`
	ConnectedWebsite              string    `json:"connected_website,omitempty"`
	WriteAccessAllowed            *present  `json:"write_access_allowed,omitempty"`
	PassportData                  *present  `json:"passport_data,omitempty"`
	ProximityAlertTriggered       *present  `json:"proximity_alert_triggered,omitempty"`
	BoostAdded                    *present  `json:"boost_added,omitempty"`
	ChatBackgroundSet             *present  `json:"chat_background_set,omitempty"`
	ChecklistTasksDone            *present  `json:"checklist_tasks_done,omitempty"`
	ChecklistTasksAdded           *present  `json:"checklist_tasks_added,omitempty"`
	DirectMessagePriceChanged     *present  `json:"direct_message_price_changed,omitempty"`
	ForumTopicCreated             *present  `json:"forum_topic_created,omitempty"`
	ForumTopicEdited              *present  `json:"forum_topic_edited,omitempty"`
	ForumTopicClosed              *present  `json:"forum_topic_closed,omitempty"`
	ForumTopicReopened            *present  `json:"forum_topic_reopened,omitempty"`
	GeneralForumTopicHidden       *present  `json:"general_forum_topic_hidden,omitempty"`
	GeneralForumTopicUnhidden     *present  `json:"general_forum_topic_unhidden,omitempty"`
	GiveawayCreated               *present  `json:"giveaway_created,omitempty"`
	GiveawayWinners               *present  `json:"giveaway_winners,omitempty"`
	GiveawayCompleted             *present  `json:"giveaway_completed,omitempty"`
	PaidMessagePriceChanged       *present  `json:"paid_message_price_changed,omitempty"`
	ChatOwnerLeft                 *present  `json:"chat_owner_left,omitempty"`
	ChatOwnerChanged              *present  `json:"chat_owner_changed,omitempty"`
	SuggestedPostApproved         *present  `json:"suggested_post_approved,omitempty"`
	SuggestedPostApprovalFailed   *present  `json:"suggested_post_approval_failed,omitempty"`
	SuggestedPostDeclined         *present  `json:"suggested_post_declined,omitempty"`
	SuggestedPostPaid             *present  `json:"suggested_post_paid,omitempty"`
	SuggestedPostRefunded         *present  `json:"suggested_post_refunded,omitempty"`
	VoiceChatScheduled            *present  `json:"voice_chat_scheduled,omitempty"`
	VoiceChatStarted              *present  `json:"voice_chat_started,omitempty"`
	VoiceChatEnded                *present  `json:"voice_chat_ended,omitempty"`
	VoiceChatParticipantsInvited  *present  `json:"voice_chat_participants_invited,omitempty"`
	// The Bot API's names for the four above since version 6.0, which the SDK does not read.
	VideoChatScheduled           *present `json:"video_chat_scheduled,omitempty"`
	VideoChatStarted             *present `json:"video_chat_started,omitempty"`
	VideoChatEnded               *present `json:"video_chat_ended,omitempty"`
	VideoChatParticipantsInvited *present `json:"video_chat_participants_invited,omitempty"`
}

// pollInfo, checklistInfo and titled are the parts of a poll, a checklist, a game and an
// invoice that the agent is told.
type pollInfo struct {
	Question string `json:"question"`
	Options  []struct {
		Text string `json:"text"`
	} `json:"options"`
}

type checklistInfo struct {
	Title string `json:"title"`
	Tasks []struct {
		Text string `json:"text"`
	} `json:"tasks"`
}

type titled struct {
	Title string `json:"title"`
}
