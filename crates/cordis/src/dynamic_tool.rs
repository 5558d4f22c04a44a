//! A model-visible tool a running package registered: calls go back into the package's
//! JavaScript on its engine thread.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use dsh_kernel::{BoxError, BoxFuture};
use dsh_llm::ToolSchema;
use dsh_tools::{Tool, ToolOutput, ToolRunContext};
use serde_json::Value;

use crate::engine::{ToolSpec, WorkerLink};
use crate::json::pretty;

pub(crate) struct DynamicTool {
    schema: ToolSchema,
    link: Arc<WorkerLink>,
    plugin: String,
}

impl DynamicTool {
    pub(crate) fn new(spec: ToolSpec, link: Arc<WorkerLink>, plugin: &str) -> Self {
        let parameters = match spec.parameters {
            Value::Object(mut map) => {
                if !map.contains_key("type") {
                    map.insert("type".into(), Value::from("object"));
                }
                Value::Object(map)
            }
            _ => serde_json::json!({"type": "object", "properties": {}}),
        };
        Self {
            schema: ToolSchema {
                name: spec.name,
                description: spec.description,
                parameters: Arc::new(parameters),
            },
            link,
            plugin: plugin.to_string(),
        }
    }
}

impl Tool for DynamicTool {
    fn schema(&self) -> &ToolSchema {
        &self.schema
    }

    fn validate(&self, args: &Value) -> Result<(), String> {
        if args.is_object() {
            Ok(())
        } else {
            Err("invalid arguments: \"arguments\" must be an object".into())
        }
    }

    fn execute(
        &self,
        args: Value,
        ctx: ToolRunContext,
    ) -> BoxFuture<'static, Result<ToolOutput, BoxError>> {
        let link = self.link.clone();
        let name = self.schema.name.clone();
        let plugin = self.plugin.clone();
        Box::pin(async move {
            let abort = Arc::new(AtomicBool::new(false));
            let call = link.call(&name, args, abort.clone());
            tokio::pin!(call);
            let answer = tokio::select! {
                answer = &mut call => answer,
                () = ctx.cancel.cancelled() => {
                    // The engine interrupts the call at its next check.
                    abort.store(true, Ordering::Relaxed);
                    call.await
                }
            };
            match answer {
                Ok(Value::String(text)) => Ok(ToolOutput::text(text)),
                Ok(Value::Null) => Ok(ToolOutput::text("(no output)")),
                Ok(value) => {
                    let text = pretty(&value);
                    ctx.set_value(value);
                    Ok(ToolOutput::text(text))
                }
                Err(message) => Err(format!(
                    "dynamic tool \"{name}\" of plugin {plugin} failed: {message}"
                )
                .into()),
            }
        })
    }
}
