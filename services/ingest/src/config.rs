use npcmem_core::validate::ConversationLimits;
use npcmem_service::CommonConfig;

/// npcmem-ingest: records finished conversations and queues them for extraction.
#[derive(Debug, Clone, clap::Parser)]
#[command(name = "npcmem-ingest", version, about, args_override_self = true)]
pub struct IngestConfig {
    #[command(flatten)]
    pub common: CommonConfig,
    /// Most messages one conversation may carry.
    #[arg(long, env = "NPCMEM_MAX_MESSAGES", default_value_t = 200)]
    pub max_messages: usize,
    /// Longest message text, in characters.
    #[arg(long, env = "NPCMEM_MAX_MESSAGE_CHARS", default_value_t = 4000)]
    pub max_message_chars: usize,
    /// Largest conversation.ended payload, in bytes.
    #[arg(long, env = "NPCMEM_MAX_PAYLOAD_BYTES", default_value_t = 64 * 1024)]
    pub max_payload_bytes: usize,
    /// Longest NPC or player name, in characters.
    #[arg(long, env = "NPCMEM_MAX_NAME_CHARS", default_value_t = 100)]
    pub max_name_chars: usize,
    /// Longest working-memory summary, in characters.
    #[arg(long, env = "NPCMEM_SUMMARY_MAX_CHARS", default_value_t = 400)]
    pub summary_max_chars: usize,
}

impl IngestConfig {
    pub fn limits(&self) -> ConversationLimits {
        ConversationLimits {
            max_messages: self.max_messages,
            max_text_chars: self.max_message_chars,
            max_payload_bytes: self.max_payload_bytes,
            max_name_chars: self.max_name_chars,
        }
    }
}
