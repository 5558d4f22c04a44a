//! `ask_user_question`, the tool of the `tool-ask-user` row.

use std::sync::Arc;

use dsh_agent::Agents;
use dsh_kernel::{BoxError, BoxFuture, Context};
use dsh_llm::ToolSchema;
use dsh_tools::{ObjectSchema, Prop, Tool, ToolOutput, ToolRunContext};
use serde_json::{Map, Value, json};

use crate::service::{AskRequest, UserQuestions};
use crate::types::{Answer, Question, QuestionOption};

pub const ASK_USER_TOOL: &str = "ask_user_question";

const DESCRIPTION: &str = "Put one or more short questions to the user and wait for the answers: use it when you need a decision, a confirmation or facts you cannot find out yourself. Give each question an id; the answer lists, per id, the options the user picked and any text they typed.";

/// The model-facing schema. Nested objects accept extra keys (`additionalProperties:
/// true`), which the schema builder does not spell, so it is written out here.
fn parameters() -> Value {
    json!({
        "type": "object",
        "properties": {
            "questions": {
                "type": "array",
                "description": "The questions, asked together.",
                "items": {
                    "type": "object",
                    "additionalProperties": true,
                    "properties": {
                        "id": {"type": "string", "description": "Your id for the question; the answer refers to it."},
                        "question": {"type": "string", "description": "The question itself, worded for the user."},
                        "header": {"type": "string", "description": "Optional short title shown above the question, e.g. \"Confirm\" or \"Pick a mode\"."},
                        "options": {
                            "type": "array",
                            "description": "Optional answers to choose from. Put the one you recommend first and end its label with \"(Recommended)\".",
                            "items": {
                                "type": "object",
                                "additionalProperties": true,
                                "properties": {
                                    "label": {"type": "string", "description": "The option as the user sees it, kept short."},
                                    "description": {"type": "string", "description": "One sentence on what choosing this option means."}
                                },
                                "required": ["label"]
                            }
                        },
                        "multi_select": {"type": "boolean", "description": "Let the user pick several options (default false)."}
                    },
                    "required": ["id", "question"]
                }
            }
        },
        "required": ["questions"]
    })
}

/// The same shape for validation (extra keys are accepted, as the schema says).
fn validator() -> ObjectSchema {
    let option = ObjectSchema::new()
        .required("label", Prop::string(""))
        .optional("description", Prop::string(""));
    let question = ObjectSchema::new()
        .required("id", Prop::string(""))
        .required("question", Prop::string(""))
        .optional("header", Prop::string(""))
        .optional("options", Prop::array("", Prop::Object(option)))
        .optional("multi_select", Prop::boolean(""));
    ObjectSchema::new().required("questions", Prop::array("", Prop::Object(question)))
}

/// The tool result: the answer as compact JSON.
pub fn render_answer(answer: &Answer) -> String {
    dsh_kernel::json::to_string(&answer_value(answer))
}

/// The canonical value: `{answers: [{id, selected, custom?}]}`.
fn answer_value(answer: &Answer) -> Value {
    let answers: Vec<Value> = answer
        .answers
        .iter()
        .map(|a| {
            let mut m = Map::new();
            m.insert("id".into(), Value::from(a.id.clone()));
            m.insert("selected".into(), Value::from(a.selected.clone()));
            if let Some(c) = &a.custom {
                m.insert("custom".into(), Value::from(c.clone()));
            }
            Value::Object(m)
        })
        .collect();
    json!({ "answers": answers })
}

/// The declared output schema of `ask_user_question`.
fn output_schema() -> &'static Value {
    static S: std::sync::LazyLock<Value> = std::sync::LazyLock::new(|| {
        json!({
            "type": "object",
            "additionalProperties": false,
            "required": ["answers"],
            "properties": {"answers": {"type": "array", "items": {
                "type": "object",
                "additionalProperties": false,
                "required": ["id", "selected"],
                "properties": {
                    "id": {"type": "string"},
                    "selected": {"type": "array", "items": {"type": "string"}},
                    "custom": {"type": "string"},
                },
            }}},
        })
    });
    &S
}

fn questions_of(args: &Value) -> Vec<Question> {
    let str_of = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).map(str::to_owned);
    args.get("questions")
        .and_then(Value::as_array)
        .map(|list| {
            list.iter()
                .map(|q| Question {
                    id: str_of(q, "id").unwrap_or_default(),
                    question: str_of(q, "question").unwrap_or_default(),
                    detail: None,
                    header: str_of(q, "header"),
                    options: q.get("options").and_then(Value::as_array).map(|opts| {
                        opts.iter()
                            .map(|o| QuestionOption {
                                label: str_of(o, "label").unwrap_or_default(),
                                description: str_of(o, "description"),
                            })
                            .collect()
                    }),
                    multi_select: q.get("multi_select").and_then(Value::as_bool),
                })
                .collect()
        })
        .unwrap_or_default()
}

pub(crate) struct AskUserTool {
    schema: ToolSchema,
    params: ObjectSchema,
    service: Arc<UserQuestions>,
    ctx: Context,
}

impl AskUserTool {
    pub(crate) fn new(service: Arc<UserQuestions>, ctx: Context) -> Self {
        Self {
            schema: ToolSchema {
                name: ASK_USER_TOOL.into(),
                description: DESCRIPTION.into(),
                parameters: parameters().into(),
            },
            params: validator(),
            service,
            ctx,
        }
    }
}

impl Tool for AskUserTool {
    fn schema(&self) -> &ToolSchema {
        &self.schema
    }

    fn output_schema(&self) -> Option<&Value> {
        Some(output_schema())
    }

    fn validate(&self, args: &Value) -> Result<(), String> {
        self.params.validate(args)
    }

    fn execute(
        &self,
        args: Value,
        ctx: ToolRunContext,
    ) -> BoxFuture<'static, Result<ToolOutput, BoxError>> {
        let service = self.service.clone();
        let agent = ctx
            .session
            .as_ref()
            .and_then(|s| self.ctx.get::<Agents>()?.get(&s.id()));
        Box::pin(async move {
            let answer = service
                .ask(AskRequest {
                    questions: questions_of(&args),
                    agent,
                    cancel: ctx.cancel.clone(),
                })
                .await?;
            ctx.set_value(answer_value(&answer));
            Ok(ToolOutput::text(render_answer(&answer)))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::AnswerItem;

    #[test]
    fn the_value_is_the_rendered_answer_and_matches_its_schema() {
        let answer = Answer {
            answers: vec![
                AnswerItem {
                    id: "q1".into(),
                    selected: vec!["A".into()],
                    custom: None,
                },
                AnswerItem {
                    id: "q2".into(),
                    selected: vec![],
                    custom: Some("other".into()),
                },
            ],
        };
        let value = answer_value(&answer);
        assert_eq!(
            value,
            json!({"answers": [{"id": "q1", "selected": ["A"]},
                               {"id": "q2", "selected": [], "custom": "other"}]})
        );
        assert_eq!(render_answer(&answer), dsh_kernel::json::to_string(&value));
        let item = &output_schema()["properties"]["answers"]["items"];
        assert_eq!(item["required"], json!(["id", "selected"]));
        for a in value["answers"].as_array().into_iter().flatten() {
            for key in a.as_object().into_iter().flatten().map(|(k, _)| k) {
                assert!(item["properties"].get(key).is_some(), "{key}");
            }
        }
    }
}
