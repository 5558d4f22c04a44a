//! The typed tool layer: a tool declares its argument type (and the canonical value it
//! reports) as Rust types; [`Typed`] derives the model-facing parameter schema and the
//! declared output schema from them once, and does what every tool used to spell out —
//! schema validation with upstream's `invalid arguments: …` texts, decoding into the
//! argument type, encoding the reported value — in one place. The raw-JSON [`Tool`] trait
//! stays the registry's boundary (MCP, plugins and dynamic tools implement it directly).
//!
//! Schemas come from `schemars` and are normalized into the shapes upstream sends: a
//! parameter schema goes through [`ObjectSchema`] (so key order is `type`, `description`,
//! `properties`, `required`, and nothing schemars adds — `format`, `minimum`, `$schema`,
//! `title`, `default` — reaches a provider); an output schema takes the closed-object form
//! (`type`, `additionalProperties: false`, `required`, `properties`) with `oneOf` for
//! nullable values and tagged unions.
//!
//! Conventions for argument types: field docs are the property descriptions, written on one
//! line (a doc comment's line breaks are kept); the struct itself carries no doc comment
//! (upstream's parameter objects have no description; use `//`); unit enums carry no variant
//! docs; `Option<T>` marks an optional property; `#[serde(deny_unknown_fields)]` closes a
//! nested object. A description that depends on configuration is set by
//! [`TypedTool::tune`].

use std::future::Future;
use std::sync::{Arc, OnceLock};

use dsh_kernel::{BoxError, BoxFuture};
use dsh_llm::ToolSchema;
use schemars::JsonSchema;
use schemars::generate::{Contract, SchemaSettings};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::schema::{ObjectSchema, Prop};
use crate::tool::{Tool, ToolOutput, ToolRunContext, args_error};

/// What a typed tool body returns: what the model sees, plus the canonical value a Code Mode
/// binding resolves to (encoded by the adapter, once).
#[derive(Debug)]
pub struct Reply<V> {
    pub output: ToolOutput,
    pub value: Option<V>,
}

impl<V> Reply<V> {
    /// Output with no canonical value (a Code Mode binding resolves to the text).
    pub fn output(output: ToolOutput) -> Self {
        Self {
            output,
            value: None,
        }
    }

    /// A text result.
    pub fn text(text: impl Into<String>) -> Self {
        Self::output(ToolOutput::text(text))
    }

    /// Adds the canonical value.
    pub fn with_value(mut self, value: V) -> Self {
        self.value = Some(value);
        self
    }

    /// Adds durable presentation metadata (`tool/result.data.meta`).
    pub fn with_meta(mut self, meta: Value) -> Self {
        self.output.meta = Some(meta);
        self
    }
}

impl<V> From<ToolOutput> for Reply<V> {
    fn from(output: ToolOutput) -> Self {
        Self::output(output)
    }
}

/// A tool whose arguments and reported value are Rust types. Wrap it in [`Typed`] to
/// register it. The body receives arguments that passed the schema and decoded; it keeps
/// the checks a schema cannot say (a non-empty path, a range) and their error texts.
pub trait TypedTool: Send + Sync + Sized + 'static {
    /// The arguments; their JSON Schema is the parameter schema the model sees.
    type Args: DeserializeOwned + JsonSchema + Send + 'static;
    /// The canonical value (`()` when the tool reports none: its calls resolve to text).
    type Value: Serialize + JsonSchema + Send + 'static;

    /// The tool's name.
    fn name(&self) -> String;
    /// The description the model sees.
    fn description(&self) -> String;
    /// Adjusts the derived parameter schema (descriptions that depend on configuration).
    fn tune(&self, _params: &mut ObjectSchema) {}
    /// The declared output schema (Code Mode types the binding from it): by default derived
    /// from [`Self::Value`] (none for `()` and for a value held as `serde_json::Value`). A
    /// typed value whose upstream counterpart declares no schema returns `Ok(None)`; a value
    /// held as JSON with a known shape returns that schema.
    fn value_schema(&self) -> Result<Option<Value>, String> {
        output_schema::<Self::Value>()
    }
    /// Checks beyond the schema, run with validation (before approval and hooks); the
    /// message is the full error text.
    fn check(&self, _args: &Self::Args) -> Result<(), String> {
        Ok(())
    }
    /// Only `true` lets calls run in parallel with their neighbours. The answer does not
    /// depend on a call's arguments, so asking decodes nothing; a tool whose answer would
    /// depend on them belongs on the raw [`Tool`] trait.
    fn concurrency_safe(&self) -> bool {
        false
    }
    /// A cooperative deadline enforced by a timeout policy, if any.
    fn timeout_ms(&self) -> Option<u64> {
        None
    }
    /// Runs the tool.
    fn run(
        self: Arc<Self>,
        args: Self::Args,
        ctx: ToolRunContext,
    ) -> impl Future<Output = Result<Reply<Self::Value>, BoxError>> + Send + 'static;
}

/// A [`TypedTool`] behind the raw [`Tool`] boundary.
pub struct Typed<T: TypedTool> {
    tool: Arc<T>,
    schema: ToolSchema,
    params: ObjectSchema,
    /// Derived on first use: only Code Mode reads it, and a derivation costs tens of
    /// microseconds a tool at startup otherwise.
    output: OnceLock<Option<Value>>,
}

impl<T: TypedTool> Typed<T> {
    /// Derives the parameter schema; an argument type the provider shapes cannot express is
    /// an error naming the tool and the construct. The output schema is derived on first use.
    pub fn new(tool: T) -> Result<Self, BoxError> {
        let name = tool.name();
        let mut params = params_schema::<T::Args>()
            .map_err(|e| format!("tool \"{name}\": argument schema: {e}"))?;
        tool.tune(&mut params);
        let schema = ToolSchema {
            name,
            description: tool.description(),
            parameters: params.to_value().into(),
        };
        Ok(Self {
            tool: Arc::new(tool),
            schema,
            params,
            output: OnceLock::new(),
        })
    }

    /// The wrapped tool.
    pub fn inner(&self) -> &Arc<T> {
        &self.tool
    }

    fn decode(&self, args: &Value) -> Result<T::Args, String> {
        self.params.validate(args)?;
        T::Args::deserialize(args).map_err(|e| format!("invalid arguments: {e}"))
    }
}

impl<T: TypedTool> Tool for Typed<T> {
    fn schema(&self) -> &ToolSchema {
        &self.schema
    }

    fn output_schema(&self) -> Option<&Value> {
        self.output
            .get_or_init(|| {
                // A value type without an output shape is a programming error the
                // output-schema tests catch; here it only leaves the binding untyped.
                self.tool.value_schema().unwrap_or_else(|e| {
                    tracing::error!("tool \"{}\": output schema: {e}", self.schema.name);
                    None
                })
            })
            .as_ref()
    }

    fn validate(&self, args: &Value) -> Result<(), String> {
        let decoded = self.decode(args)?;
        self.tool.check(&decoded)
    }

    fn concurrency_safe(&self, _args: &Value) -> bool {
        self.tool.concurrency_safe()
    }

    fn timeout_ms(&self) -> Option<u64> {
        self.tool.timeout_ms()
    }

    fn execute(
        &self,
        args: Value,
        ctx: ToolRunContext,
    ) -> BoxFuture<'static, Result<ToolOutput, BoxError>> {
        // The registry validated `args` already; decoding again is the typed view of them.
        let decoded = match T::Args::deserialize(&args) {
            Ok(a) => a,
            Err(e) => {
                let message = format!("invalid arguments: {e}");
                return Box::pin(async move { Err(args_error(message)) });
            }
        };
        let mut ctx = ctx;
        ctx.arguments = Some(Arc::new(args));
        let body = self.tool.clone().run(decoded, ctx.clone());
        Box::pin(async move {
            let reply = body.await?;
            if let Some(value) = reply.value {
                ctx.set_value(serde_json::to_value(value)?);
            }
            Ok(reply.output)
        })
    }
}

/// Lenient readers for `#[serde(default, deserialize_with = "…")]` on arguments a tool reads
/// even when its schema leaves them out (config-dependent properties): a value of another
/// type counts as absent rather than failing the call, as the untyped reads did.
pub mod lenient {
    use serde::{Deserialize, Deserializer};
    use serde_json::Value;

    /// A boolean, or nothing.
    pub fn bool<'de, D: Deserializer<'de>>(d: D) -> Result<Option<bool>, D::Error> {
        Ok(Option::<Value>::deserialize(d)?.and_then(|v| v.as_bool()))
    }

    /// A string, or nothing.
    pub fn string<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
        Ok(Option::<Value>::deserialize(d)?.and_then(|v| v.as_str().map(str::to_owned)))
    }
}

fn generated<T: JsonSchema>(contract: Contract) -> Value {
    let settings = SchemaSettings::draft2020_12().with(|s| {
        s.inline_subschemas = true;
        s.meta_schema = None;
        s.contract = contract;
    });
    let mut root = settings
        .into_generator()
        .into_root_schema_for::<T>()
        .to_value();
    // The root's `title` is the Rust type's name: nothing a provider or Code Mode uses.
    if let Some(m) = root.as_object_mut() {
        m.shift_remove("title");
    }
    root
}

/// The parameter schema of `T`, in [`ObjectSchema`] form.
pub fn params_schema<T: JsonSchema>() -> Result<ObjectSchema, String> {
    object_params(&generated::<T>(Contract::Deserialize))
}

fn description(v: &Value) -> Option<String> {
    v.get("description")
        .and_then(Value::as_str)
        .map(str::to_string)
}

/// The declared type of a schema, `null` dropped (`Option<T>` is "optional", not "nullable",
/// for arguments: the validator rejects a null either way).
fn kind(v: &Value) -> Option<&str> {
    match v.get("type")? {
        Value::String(s) => Some(s),
        Value::Array(list) => {
            let mut kinds = list
                .iter()
                .filter_map(Value::as_str)
                .filter(|k| *k != "null");
            let first = kinds.next()?;
            kinds.next().is_none().then_some(first)
        }
        _ => None,
    }
}

/// `anyOf: [T, {type: null}]` (an optional struct) is `T`.
fn non_null(v: &Value) -> &Value {
    if let Some(list) = v.get("anyOf").and_then(Value::as_array) {
        let rest: Vec<&Value> = list
            .iter()
            .filter(|s| s.get("type").and_then(Value::as_str) != Some("null"))
            .collect();
        if let [only] = rest.as_slice() {
            return only;
        }
    }
    v
}

fn object_params(v: &Value) -> Result<ObjectSchema, String> {
    let v = non_null(v);
    if kind(v) != Some("object") {
        return Err(format!("expected an object, found {v}"));
    }
    let required: Vec<&str> = v
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let mut out = ObjectSchema::new();
    out.description = description(v);
    out.closed = v.get("additionalProperties") == Some(&Value::Bool(false));
    if let Some(props) = v.get("properties").and_then(Value::as_object) {
        for (name, schema) in props {
            let prop = param_prop(schema).map_err(|e| format!("property \"{name}\": {e}"))?;
            out.properties
                .push((name.clone(), prop, required.contains(&name.as_str())));
        }
    }
    Ok(out)
}

fn param_prop(v: &Value) -> Result<Prop, String> {
    let inner = non_null(v);
    // A field's doc sits beside an optional struct's `anyOf`, not inside it.
    let described = description(v).or_else(|| description(inner));
    let v = inner;
    Ok(match kind(v) {
        Some("string") => Prop::String {
            description: described,
            // An optional enum lists `null` among its values.
            enumeration: match v.get("enum").and_then(Value::as_array) {
                Some(values) => Some(
                    values
                        .iter()
                        .filter(|e| !e.is_null())
                        .map(|e| e.as_str().map(str::to_string))
                        .collect::<Option<Vec<_>>>()
                        .ok_or("a string enum with a non-string value")?,
                ),
                None => None,
            },
        },
        Some("number") => Prop::Number {
            description: described,
        },
        Some("integer") => Prop::Integer {
            description: described,
        },
        Some("boolean") => Prop::Boolean {
            description: described,
        },
        Some("array") => Prop::Array {
            description: described,
            items: Box::new(param_prop(v.get("items").ok_or("an array without items")?)?),
        },
        Some("object") => {
            let mut o = object_params(v)?;
            o.description = described;
            Prop::Object(o)
        }
        _ => return Err(format!("no parameter shape for {v}")),
    })
}

/// The declared output schema of `V` in upstream's output form; `None` for `()`.
pub fn output_schema<V: JsonSchema>() -> Result<Option<Value>, String> {
    let v = generated::<V>(Contract::Serialize);
    // `()` reports no value; a value held as JSON (`serde_json::Value`) declares no shape.
    let any = v == Value::Bool(true) || v.as_object().is_some_and(Map::is_empty);
    if any || v.get("type").and_then(Value::as_str) == Some("null") {
        return Ok(None);
    }
    output_value(&v).map(Some)
}

/// `v` with `null` taken out of its type, alternatives and values.
fn without_null(v: &Value) -> Value {
    let mut v = non_null(v).clone();
    if let Some(m) = v.as_object_mut() {
        if let Some(Value::Array(kinds)) = m.get("type") {
            let kept: Vec<Value> = kinds.iter().filter(|k| *k != "null").cloned().collect();
            let single = match kept.as_slice() {
                [one] => one.clone(),
                _ => Value::Array(kept),
            };
            m.insert("type".into(), single);
        }
        if let Some(Value::Array(values)) = m.get_mut("enum") {
            values.retain(|e| !e.is_null());
        }
    }
    v
}

fn output_value(v: &Value) -> Result<Value, String> {
    let mut out = Map::new();
    // `const` variants of a tagged union, and string enums.
    if let Some(list) = v
        .get("oneOf")
        .or_else(|| v.get("anyOf"))
        .and_then(Value::as_array)
    {
        let (nulls, rest): (Vec<&Value>, Vec<&Value>) = list
            .iter()
            .partition(|s| s.get("type").and_then(Value::as_str) == Some("null"));
        let mut alternatives = rest
            .into_iter()
            .map(output_value)
            .collect::<Result<Vec<_>, _>>()?;
        if !nulls.is_empty() {
            alternatives.push(Value::from_iter([("type", Value::from("null"))]));
        }
        out.insert("oneOf".into(), Value::Array(alternatives));
        return Ok(Value::Object(out));
    }
    let kinds: Vec<&str> = match v.get("type") {
        Some(Value::String(s)) => vec![s.as_str()],
        Some(Value::Array(list)) => list.iter().filter_map(Value::as_str).collect(),
        None if v == &Value::Bool(true) || v.as_object().is_some_and(Map::is_empty) => {
            return Ok(Value::Object(Map::new()));
        }
        _ => return Err(format!("no output shape for {v}")),
    };
    if let [kind, "null"] | ["null", kind] = kinds.as_slice() {
        let single = without_null(v);
        debug_assert_eq!(single.get("type").and_then(Value::as_str), Some(*kind));
        let alternatives = vec![
            output_value(&single)?,
            Value::from_iter([("type", Value::from("null"))]),
        ];
        out.insert("oneOf".into(), Value::Array(alternatives));
        return Ok(Value::Object(out));
    }
    let [kind] = kinds.as_slice() else {
        return Err(format!("no output shape for {v}"));
    };
    out.insert("type".into(), Value::from(*kind));
    match *kind {
        "object" => {
            out.insert("additionalProperties".into(), Value::Bool(false));
            out.insert(
                "required".into(),
                v.get("required").cloned().unwrap_or(Value::Array(vec![])),
            );
            let required = v.get("required").and_then(Value::as_array);
            let mut props = Map::new();
            if let Some(p) = v.get("properties").and_then(Value::as_object) {
                for (name, schema) in p {
                    // A key left out when empty (`skip_serializing_if`) is optional, not
                    // nullable.
                    let optional = !required.is_some_and(|r| r.iter().any(|n| n == name));
                    let schema = if optional {
                        without_null(schema)
                    } else {
                        schema.clone()
                    };
                    let s = output_value(&schema).map_err(|e| format!("\"{name}\": {e}"))?;
                    props.insert(name.clone(), s);
                }
            }
            out.insert("properties".into(), Value::Object(props));
        }
        "array" => {
            let items = v.get("items").ok_or("an array without items")?;
            out.insert("items".into(), output_value(items)?);
        }
        "string" => {
            if let Some(c) = v.get("const") {
                out.insert("const".into(), c.clone());
            }
            if let Some(e) = v.get("enum") {
                out.insert("enum".into(), e.clone());
            }
        }
        "integer" | "number" | "boolean" => {}
        other => return Err(format!("no output shape for type {other}")),
    }
    Ok(Value::Object(out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use serde_json::json;

    #[derive(Deserialize, JsonSchema)]
    #[serde(rename_all = "lowercase")]
    enum Mode {
        A,
        B,
    }

    #[derive(Deserialize, JsonSchema)]
    #[serde(deny_unknown_fields)]
    struct Item {
        /// c
        #[allow(dead_code)]
        content: String,
    }

    // No doc: parameter objects carry no description.
    #[derive(Deserialize, JsonSchema)]
    #[serde(rename_all = "camelCase")]
    #[allow(dead_code)]
    struct Args {
        /// The command
        command: String,
        /// Timeout
        timeout_ms: Option<f64>,
        /// Mode
        mode: Option<Mode>,
        /// List
        todos: Option<Vec<Item>>,
        /// Count
        count: Option<u32>,
        /// Flag
        flag: Option<bool>,
    }

    #[test]
    fn derived_parameter_schemas_take_upstream_shape_and_order() {
        let schema = params_schema::<Args>().unwrap();
        assert_eq!(
            dsh_kernel::json::to_string(&schema.to_value()),
            r#"{"type":"object","properties":{"command":{"type":"string","description":"The command"},"timeoutMs":{"type":"number","description":"Timeout"},"mode":{"type":"string","description":"Mode","enum":["a","b"]},"todos":{"type":"array","description":"List","items":{"type":"object","additionalProperties":false,"properties":{"content":{"type":"string","description":"c"}},"required":["content"]}},"count":{"type":"integer","description":"Count"},"flag":{"type":"boolean","description":"Flag"}},"required":["command"]}"#
        );
    }

    #[derive(Serialize, JsonSchema)]
    #[serde(tag = "kind", rename_all = "camelCase")]
    #[allow(dead_code)]
    enum Status {
        Running,
        Exited {
            #[serde(rename = "exitCode")]
            exit_code: Option<i32>,
        },
    }

    #[derive(Serialize, JsonSchema)]
    #[serde(rename_all = "camelCase")]
    struct Out {
        path: String,
        before: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        name: Option<String>,
        lines: Vec<u64>,
        status: Status,
    }

    #[test]
    fn derived_output_schemas_are_closed_objects_with_nullable_one_of() {
        assert_eq!(output_schema::<()>().unwrap(), None);
        assert_eq!(output_schema::<Value>().unwrap(), None);
        let schema = output_schema::<Out>().unwrap().unwrap();
        let object = |required: Value, properties: Value| json!({"type": "object", "additionalProperties": false, "required": required, "properties": properties});
        assert_eq!(
            schema,
            object(
                json!(["path", "before", "lines", "status"]),
                json!({
                    "path": {"type": "string"},
                    "before": {"oneOf": [{"type": "string"}, {"type": "null"}]},
                    "name": {"type": "string"},
                    "lines": {"type": "array", "items": {"type": "integer"}},
                    "status": {"oneOf": [
                        object(json!(["kind"]), json!({"kind": {"type": "string", "const": "running"}})),
                        object(json!(["kind", "exitCode"]), json!({
                            "kind": {"type": "string", "const": "exited"},
                            "exitCode": {"oneOf": [{"type": "integer"}, {"type": "null"}]},
                        })),
                    ]},
                })
            )
        );
    }

    #[test]
    fn a_type_without_a_provider_shape_is_named() {
        #[derive(Deserialize, JsonSchema)]
        #[allow(dead_code)]
        struct Bad {
            /// Either
            value: either_type::Either,
        }
        mod either_type {
            #[derive(serde::Deserialize, schemars::JsonSchema)]
            #[serde(untagged)]
            pub enum Either {
                #[allow(dead_code)]
                S(String),
                #[allow(dead_code)]
                N(f64),
            }
        }
        let err = params_schema::<Bad>().unwrap_err();
        assert!(
            err.starts_with("property \"value\": no parameter shape"),
            "{err}"
        );
    }
}
