//! Extra top-level fields a provider adds to its requests on behalf of other plugins
//! (upstream 0.2's `deepseekLlmApiExtensions`): each field has one owner that prepares its
//! value per request and may ask to be told when the provider accepted the request (HTTP
//! 2xx), so it can remember what was delivered.
//!
//! Preparing never fails a request: a field whose owner fails is left out of it (logged once
//! per field). Which provider consults the registry is the provider's choice; in this build
//! only the official DeepSeek route does.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, RwLock};

use dsh_kernel::Context;

use crate::request::CallPurpose;

/// What an owner learns about the request a field is prepared for.
#[derive(Clone, Copy, Debug)]
pub struct ExtensionRequest<'a> {
    pub provider: &'a str,
    pub model: &'a str,
    pub session_id: Option<&'a str>,
    pub purpose: CallPurpose,
}

/// Called once the provider accepted the request that carried the field.
pub type AcceptFn = Box<dyn FnOnce() -> Result<(), String> + Send>;

/// One prepared field: its JSON text and what to do on acceptance.
pub struct ExtensionField {
    /// The field's value, serialized (spliced into the request body as is).
    pub json: String,
    pub accept: Option<AcceptFn>,
}

/// The owner of one field.
pub trait RequestExtension: Send + Sync {
    /// The field's value for `request`, `Ok(None)` to leave it out this time.
    fn prepare(&self, request: &ExtensionRequest<'_>) -> Result<Option<ExtensionField>, String>;
}

/// The fields prepared for one request, in registration order, and their acceptances.
#[derive(Default)]
pub struct PreparedExtensions {
    pub fields: Vec<(String, String)>,
    accepts: Vec<(String, AcceptFn)>,
}

impl PreparedExtensions {
    pub fn is_empty(&self) -> bool {
        self.fields.is_empty()
    }

    /// Runs every acceptance (once the provider answered 2xx). A failing one is logged and
    /// does not fail the request: its owner sends the same data again next time.
    pub fn accept(self) {
        for (field, accept) in self.accepts {
            if let Err(error) = accept() {
                tracing::warn!(
                    "request extension field \"{field}\": recording its delivery failed ({error}); it is sent again with a later request"
                );
            }
        }
    }
}

/// The registry service (`deepseek-llm-api-extensions` row).
#[derive(Default)]
pub struct RequestExtensions {
    owners: RwLock<Vec<(String, Arc<dyn RequestExtension>)>>,
    warned: Mutex<HashSet<String>>,
}

impl RequestExtensions {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Registers the only owner of `field` until `ctx` unloads.
    pub fn register(
        self: &Arc<Self>,
        ctx: &Context,
        field: &str,
        owner: Arc<dyn RequestExtension>,
    ) -> Result<(), String> {
        if field.is_empty() || field.trim() != field {
            return Err(format!(
                "request extension field {field:?} must be a non-blank name without surrounding spaces"
            ));
        }
        {
            let mut owners = self.owners.write().unwrap_or_else(|p| p.into_inner());
            if owners.iter().any(|(f, _)| f == field) {
                return Err(format!(
                    "request extension field \"{field}\" already has an owner"
                ));
            }
            owners.push((field.to_string(), owner));
        }
        let registry = Arc::downgrade(self);
        let name = field.to_string();
        ctx.effect("request-extension", move || {
            if let Some(registry) = registry.upgrade() {
                registry
                    .owners
                    .write()
                    .unwrap_or_else(|p| p.into_inner())
                    .retain(|(f, _)| *f != name);
            }
        })
        .map(|_| ())
        .map_err(|e| e.to_string())
    }

    /// Prepares every registered field for `request`. An owner that fails is left out (the
    /// first failure of each field is logged).
    pub fn prepare(&self, request: &ExtensionRequest<'_>) -> PreparedExtensions {
        let owners = self
            .owners
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let mut prepared = PreparedExtensions::default();
        for (field, owner) in owners {
            match owner.prepare(request) {
                Ok(None) => {}
                Ok(Some(ExtensionField { json, accept })) => {
                    if let Some(accept) = accept {
                        prepared.accepts.push((field.clone(), accept));
                    }
                    prepared.fields.push((field, json));
                }
                Err(error) => {
                    let first = self
                        .warned
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .insert(field.clone());
                    if first {
                        tracing::warn!(
                            "request extension field \"{field}\" is left out of this request: {error}"
                        );
                    }
                }
            }
        }
        prepared
    }
}

/// Adds `fields` to the serialized JSON object `body` (its last byte is `}`). A field that
/// the body already has is refused: extensions never replace what the provider sends.
pub fn splice_fields(
    body: &str,
    base: &serde_json::Map<String, serde_json::Value>,
    fields: &[(String, String)],
) -> Result<String, String> {
    if let Some((field, _)) = fields.iter().find(|(f, _)| base.contains_key(f)) {
        return Err(format!(
            "request extension field \"{field}\" collides with a field of the request itself"
        ));
    }
    let trimmed = body.trim_end();
    let Some(head) = trimmed.strip_suffix('}') else {
        return Err("the request body is not a JSON object".into());
    };
    let mut out = String::with_capacity(
        body.len()
            + fields
                .iter()
                .map(|(f, v)| f.len() + v.len() + 4)
                .sum::<usize>(),
    );
    out.push_str(head);
    let mut empty = head.trim_end().ends_with('{');
    for (field, json) in fields {
        if !empty {
            out.push(',');
        }
        empty = false;
        out.push_str(&serde_json::Value::from(field.as_str()).to_string());
        out.push(':');
        out.push_str(json);
    }
    out.push('}');
    Ok(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    struct Fixed(&'static str, Arc<Mutex<u32>>);
    impl RequestExtension for Fixed {
        fn prepare(&self, _: &ExtensionRequest<'_>) -> Result<Option<ExtensionField>, String> {
            if self.0.is_empty() {
                return Err("nothing to send".into());
            }
            let hits = self.1.clone();
            Ok(Some(ExtensionField {
                json: self.0.to_string(),
                accept: Some(Box::new(move || {
                    *hits.lock().unwrap() += 1;
                    Ok(())
                })),
            }))
        }
    }

    fn request() -> ExtensionRequest<'static> {
        ExtensionRequest {
            provider: "p",
            model: "m",
            session_id: Some("s"),
            purpose: CallPurpose::Conversation,
        }
    }

    #[test]
    fn fields_are_spliced_in_order_and_accepted_once_each() {
        let ctx = Context::new_root();
        let registry = RequestExtensions::new();
        let hits = Arc::new(Mutex::new(0));
        registry
            .register(&ctx, "a", Arc::new(Fixed("{\"x\":1}", hits.clone())))
            .unwrap();
        registry
            .register(&ctx, "b", Arc::new(Fixed("[2]", hits.clone())))
            .unwrap();
        assert!(
            registry
                .register(&ctx, "a", Arc::new(Fixed("0", hits.clone())))
                .unwrap_err()
                .contains("already has an owner")
        );
        let prepared = registry.prepare(&request());
        let base = json!({"model": "m"});
        let body = splice_fields(
            &base.to_string(),
            base.as_object().unwrap(),
            &prepared.fields,
        )
        .unwrap();
        let parsed: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(parsed, json!({"model": "m", "a": {"x": 1}, "b": [2]}));
        prepared.accept();
        assert_eq!(*hits.lock().unwrap(), 2);
    }

    #[test]
    fn a_failing_owner_is_left_out_and_a_colliding_field_is_refused() {
        let ctx = Context::new_root();
        let registry = RequestExtensions::new();
        let hits = Arc::new(Mutex::new(0));
        registry
            .register(&ctx, "broken", Arc::new(Fixed("", hits.clone())))
            .unwrap();
        registry
            .register(&ctx, "model", Arc::new(Fixed("1", hits)))
            .unwrap();
        let prepared = registry.prepare(&request());
        assert_eq!(prepared.fields.len(), 1);
        let base = json!({"model": "m"});
        let error = splice_fields(
            &base.to_string(),
            base.as_object().unwrap(),
            &prepared.fields,
        )
        .unwrap_err();
        assert!(error.contains("\"model\" collides"), "{error}");
        let empty =
            splice_fields("{}", &serde_json::Map::new(), &[("a".into(), "1".into())]).unwrap();
        assert_eq!(empty, "{\"a\":1}");
    }

    #[test]
    fn an_owner_leaves_with_its_plugin() {
        let root = Context::new_root();
        let plugin = root.child("row");
        let registry = RequestExtensions::new();
        registry
            .register(&plugin, "a", Arc::new(Fixed("1", Arc::default())))
            .unwrap();
        plugin.dispose();
        assert!(registry.prepare(&request()).is_empty());
    }
}
