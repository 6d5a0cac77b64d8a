//! Conversations into prompt text for `generate --chat` / `--messages` and `eval`'s
//! `{"messages": [...]}` lines: the target's chat template (or a template file) rendered
//! as llama-server's `/apply-template` renders it (`dspark_runtime::chat`).

use std::path::Path;

use anyhow::Result;
use dspark_runtime::chat::{ChatOptions, ChatTemplate, MAX_TEMPLATE_BYTES};
use dspark_runtime::OpenedTarget;

use crate::usage;

/// A target's chat template, ready to render conversations.
pub struct Renderer {
    template: ChatTemplate,
    options: ChatOptions,
    /// The file that gave the template (for messages).
    name: String,
    /// The vocabulary adds BOS itself: a rendering's leading BOS text is dropped.
    adds_bos: bool,
}

impl Renderer {
    /// The template of `template_file`, else the target's own `tokenizer.chat_template`
    /// (a usage error naming `target_path` when it has none); BOS / EOS texts from the
    /// target's vocabulary; `date` for the template's date (today when `None`).
    pub fn for_target(
        target: &OpenedTarget,
        target_path: &Path,
        template_file: Option<&Path>,
        date: Option<chrono::NaiveDate>,
    ) -> Result<Renderer> {
        let source = match template_file {
            Some(path) => {
                let bytes =
                    dspark_runtime::tokenizer::read_capped(path, MAX_TEMPLATE_BYTES as u64 + 1)
                        .map_err(anyhow::Error::new)?;
                String::from_utf8(bytes).map_err(|_| {
                    anyhow::anyhow!("{}: the chat template is not UTF-8 text", path.display())
                })?
            }
            None => match &target.chat_template {
                Some(t) => t.clone(),
                None => usage!(
                    "{} carries no chat template (tokenizer.chat_template): give --chat-template-file",
                    target_path.display()
                ),
            },
        };
        let name = template_file.unwrap_or(target_path).display().to_string();
        let template = ChatTemplate::new(&source).map_err(|e| anyhow::anyhow!("{name}: {e}"))?;
        let special = target.model.special_tokens();
        let text = |id: Option<u32>| {
            id.and_then(|i| target.tokenizer.as_ref().and_then(|t| t.token_text(i)))
                .unwrap_or_default()
        };
        let options = ChatOptions::llama_server(
            text(special.bos),
            text(special.eos),
            date.map(|d| d.and_time(chrono::NaiveTime::MIN)),
        );
        Ok(Renderer {
            template,
            options,
            name,
            adds_bos: target.tokenizer.as_ref().is_some_and(|t| t.adds_bos()),
        })
    }

    /// `messages` (a JSON array of OpenAI-style messages) as llama-server renders them:
    /// its message adjustments, its context variables, and the BOS text taken off the
    /// front when the vocabulary adds BOS itself (tokenize the result with the
    /// vocabulary's special-token rule, as llama-server does).
    pub fn render(&self, messages: &serde_json::Value) -> Result<String> {
        let err = |e| anyhow::anyhow!("{}: {e}", self.name);
        let messages = self.template.llama_server_messages(messages).map_err(err)?;
        let text = self
            .template
            .render(&messages, &self.options)
            .map_err(err)?;
        let bos = &self.options.bos_token;
        Ok(match text.strip_prefix(bos.as_str()) {
            Some(rest) if self.adds_bos && !bos.is_empty() => rest.to_string(),
            _ => text,
        })
    }
}
