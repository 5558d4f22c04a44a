//! `@deepseek-ai/dsh-test-workspace-context-compaction` (upstream's workspace-context fixture).

use dsh_kernel::{BoxError, Context, ListenOptions, Plugin, PluginConfig};
use dsh_llm::{ContentBlock, Message, MessageSource};
use dsh_policies::instructions::SOURCE_KIND;
use dsh_session::types;
use serde_json::{Map, Value};

/// `workspace-context-compaction`: a fixture of upstream's snapshot suite — after a read of
/// `nested/task.txt`, the visible instruction baseline is replaced by a short note, as a
/// compaction would.
pub struct CompactionFixturePlugin;

impl Plugin for CompactionFixturePlugin {
    fn name(&self) -> &'static str {
        "@deepseek-ai/dsh-test-workspace-context-compaction"
    }

    fn apply(&self, ctx: &Context, _config: &PluginConfig) -> Result<(), BoxError> {
        ctx.on_waterfall::<dsh_tools::PostExecute>(ListenOptions::default(), |p, next| {
            Box::pin(async move {
                let decision = next.run().await?;
                let hit = p.exec.name == "read"
                    && !p.result.is_error
                    && p.exec.arguments.get("file_path").and_then(Value::as_str)
                        == Some("nested/task.txt");
                if let (true, Some(session)) = (hit, &p.exec.session) {
                    let baseline = session.read(|s| {
                        s.events()
                            .iter()
                            .rev()
                            .find(|e| {
                                e.is(types::USER_MESSAGE)
                                    && e.data.pointer("/source/kind").and_then(Value::as_str)
                                        == Some(SOURCE_KIND)
                                    && e.data.pointer("/source/baseline")
                                        == Some(&Value::Bool(true))
                                    && s.surface().nodes().contains(&e.seq)
                            })
                            .map(|e| e.seq)
                    });
                    if let Some(b) = baseline {
                        let mut source = Map::new();
                        source.insert("kind".into(), Value::from("plugin"));
                        source.insert("plugin".into(), Value::from("compact"));
                        source.insert(
                            "compactionId".into(),
                            Value::from("workspace-context-fixture"),
                        );
                        let m = Message::user(
                            vec![ContentBlock::text(
                                "Earlier context was compacted for this snapshot.",
                            )],
                            MessageSource::Other(source),
                        );
                        session.append(
                            types::USER_MESSAGE,
                            m.to_value(),
                            Some(dsh_session::SurfaceIntent {
                                op: dsh_session::SurfaceOp::Replace { start: b, end: b },
                                sources: Some(vec![b]),
                            }),
                        )?;
                    }
                }
                Ok(decision)
            })
        })?;
        Ok(())
    }
}
