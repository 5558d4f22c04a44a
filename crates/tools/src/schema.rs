//! Parameter schemas: a small builder producing the model-facing JSON Schema in upstream's
//! key order, and argument validation with upstream's `invalid arguments: …` texts.

use serde_json::{Map, Value};

/// One property type.
#[derive(Clone, Debug, PartialEq)]
pub enum Prop {
    String {
        description: Option<String>,
        enumeration: Option<Vec<String>>,
    },
    Number {
        description: Option<String>,
    },
    Integer {
        description: Option<String>,
    },
    Boolean {
        description: Option<String>,
    },
    Array {
        description: Option<String>,
        items: Box<Prop>,
    },
    Object(ObjectSchema),
}

impl Prop {
    pub fn string(description: &str) -> Self {
        Prop::String {
            description: Some(description.into()),
            enumeration: None,
        }
    }

    pub fn enumeration(description: &str, values: &[&str]) -> Self {
        Prop::String {
            description: Some(description.into()),
            enumeration: Some(values.iter().map(|s| s.to_string()).collect()),
        }
    }

    pub fn number(description: &str) -> Self {
        Prop::Number {
            description: Some(description.into()),
        }
    }

    pub fn integer(description: &str) -> Self {
        Prop::Integer {
            description: Some(description.into()),
        }
    }

    pub fn boolean(description: &str) -> Self {
        Prop::Boolean {
            description: Some(description.into()),
        }
    }

    pub fn array(description: &str, items: Prop) -> Self {
        Prop::Array {
            description: Some(description.into()),
            items: Box::new(items),
        }
    }

    fn set_description(&mut self, text: &str) {
        let slot = match self {
            Prop::String { description, .. }
            | Prop::Number { description }
            | Prop::Integer { description }
            | Prop::Boolean { description }
            | Prop::Array { description, .. } => description,
            Prop::Object(o) => &mut o.description,
        };
        *slot = Some(text.into());
    }

    fn to_value(&self) -> Value {
        let mut m = Map::new();
        let scalar = |m: &mut Map<String, Value>, t: &str, d: &Option<String>| {
            m.insert("type".into(), Value::from(t));
            if let Some(d) = d {
                m.insert("description".into(), Value::from(d.clone()));
            }
        };
        match self {
            Prop::String {
                description,
                enumeration,
            } => {
                scalar(&mut m, "string", description);
                if let Some(e) = enumeration {
                    m.insert("enum".into(), Value::from(e.clone()));
                }
            }
            Prop::Number { description } => scalar(&mut m, "number", description),
            Prop::Integer { description } => scalar(&mut m, "integer", description),
            Prop::Boolean { description } => scalar(&mut m, "boolean", description),
            Prop::Array { description, items } => {
                scalar(&mut m, "array", description);
                m.insert("items".into(), items.to_value());
            }
            Prop::Object(o) => return o.to_value(),
        }
        Value::Object(m)
    }

    fn validate(&self, path: &str, value: &Value, out: &mut Vec<String>) {
        let ok = match self {
            Prop::String { enumeration, .. } => match value.as_str() {
                None => {
                    out.push(format!("\"{path}\" must be a string"));
                    return;
                }
                Some(s) => {
                    if let Some(e) = enumeration
                        && !e.iter().any(|x| x == s)
                    {
                        out.push(format!(
                            "\"{path}\" must be one of {}",
                            serde_json::to_string(e).unwrap_or_default()
                        ));
                    }
                    return;
                }
            },
            Prop::Number { .. } => value.is_number(),
            Prop::Integer { .. } => value.as_f64().is_some_and(|f| f.fract() == 0.0),
            Prop::Boolean { .. } => value.is_boolean(),
            Prop::Array { items, .. } => match value.as_array() {
                Some(list) => {
                    for (i, item) in list.iter().enumerate() {
                        items.validate(&format!("{path}[{i}]"), item, out);
                    }
                    return;
                }
                None => {
                    out.push(format!("\"{path}\" must be an array"));
                    return;
                }
            },
            Prop::Object(o) => {
                o.validate_at(path, value, out);
                return;
            }
        };
        if !ok {
            let kind = match self {
                Prop::Number { .. } => "a number",
                Prop::Integer { .. } => "an integer",
                Prop::Boolean { .. } => "a boolean",
                _ => "valid",
            };
            out.push(format!("\"{path}\" must be {kind}"));
        }
    }
}

/// An object schema with properties in declaration order.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct ObjectSchema {
    pub description: Option<String>,
    pub properties: Vec<(String, Prop, bool)>,
    /// `additionalProperties: false` when set (only reported for nested objects).
    pub closed: bool,
}

impl ObjectSchema {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn required(mut self, name: &str, prop: Prop) -> Self {
        self.properties.push((name.into(), prop, true));
        self
    }

    pub fn optional(mut self, name: &str, prop: Prop) -> Self {
        self.properties.push((name.into(), prop, false));
        self
    }

    pub fn closed(mut self) -> Self {
        self.closed = true;
        self
    }

    pub fn describe(mut self, description: &str) -> Self {
        self.description = Some(description.into());
        self
    }

    /// Replaces the description of property `name` (a no-op for an unknown name).
    pub fn describe_property(&mut self, name: &str, description: &str) {
        if let Some((_, prop, _)) = self.properties.iter_mut().find(|(n, _, _)| n == name) {
            prop.set_description(description);
        }
    }

    /// The JSON Schema sent to the model.
    pub fn to_value(&self) -> Value {
        let mut m = Map::new();
        m.insert("type".into(), Value::from("object"));
        if let Some(d) = &self.description {
            m.insert("description".into(), Value::from(d.clone()));
        }
        if self.closed {
            m.insert("additionalProperties".into(), Value::Bool(false));
        }
        let mut props = Map::new();
        for (name, prop, _) in &self.properties {
            props.insert(name.clone(), prop.to_value());
        }
        m.insert("properties".into(), Value::Object(props));
        let required: Vec<Value> = self
            .properties
            .iter()
            .filter(|(_, _, r)| *r)
            .map(|(n, _, _)| Value::from(n.clone()))
            .collect();
        if !required.is_empty() {
            m.insert("required".into(), Value::Array(required));
        }
        Value::Object(m)
    }

    fn validate_at(&self, path: &str, value: &Value, out: &mut Vec<String>) {
        let Some(map) = value.as_object() else {
            let shown = if path.is_empty() { "arguments" } else { path };
            out.push(format!("\"{shown}\" must be an object"));
            return;
        };
        let join = |name: &str| {
            if path.is_empty() {
                name.to_string()
            } else {
                format!("{path}.{name}")
            }
        };
        for (name, _, required) in &self.properties {
            if *required && !map.contains_key(name) {
                out.push(format!("missing required property \"{}\"", join(name)));
            }
        }
        for (name, prop, _) in &self.properties {
            if let Some(v) = map.get(name) {
                prop.validate(&join(name), v, out);
            }
        }
        if self.closed {
            for key in map.keys() {
                if !self.properties.iter().any(|(n, _, _)| n == key) {
                    out.push(format!(
                        "\"{}\" is not a declared property (additionalProperties: false)",
                        join(key)
                    ));
                }
            }
        }
    }

    /// Validates parsed arguments; the error text is upstream's `invalid arguments: …`.
    pub fn validate(&self, args: &Value) -> Result<(), String> {
        let mut out = Vec::new();
        self.validate_at("", args, &mut out);
        if out.is_empty() {
            Ok(())
        } else {
            Err(format!("invalid arguments: {}", out.join("; ")))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use serde_json::json;

    fn schema() -> ObjectSchema {
        ObjectSchema::new()
            .required("command", Prop::string("The command"))
            .optional("timeoutMs", Prop::number("Timeout"))
            .optional("mode", Prop::enumeration("Mode", &["a", "b"]))
            .optional(
                "todos",
                Prop::array(
                    "List",
                    Prop::Object(
                        ObjectSchema::new()
                            .required("content", Prop::string("c"))
                            .closed(),
                    ),
                ),
            )
    }

    #[test]
    fn schema_json_uses_upstream_key_order() {
        assert_eq!(
            dsh_kernel::json::to_string(&schema().to_value()),
            r#"{"type":"object","properties":{"command":{"type":"string","description":"The command"},"timeoutMs":{"type":"number","description":"Timeout"},"mode":{"type":"string","description":"Mode","enum":["a","b"]},"todos":{"type":"array","description":"List","items":{"type":"object","additionalProperties":false,"properties":{"content":{"type":"string","description":"c"}},"required":["content"]}}},"required":["command"]}"#
        );
    }

    #[test]
    fn violations_read_like_upstream() {
        assert_eq!(schema().validate(&json!({"command": "ls"})), Ok(()));
        assert_eq!(
            schema().validate(&json!({"timeoutMs": "x", "mode": "c"})),
            Err(r#"invalid arguments: missing required property "command"; "timeoutMs" must be a number; "mode" must be one of ["a","b"]"#.into())
        );
        assert_eq!(
            schema().validate(&json!({"command": "ls", "todos": [{"content": 1, "x": 2}]})),
            Err(r#"invalid arguments: "todos[0].content" must be a string; "todos[0].x" is not a declared property (additionalProperties: false)"#.into())
        );
        assert_eq!(
            schema().validate(&json!("raw")),
            Err(r#"invalid arguments: "arguments" must be an object"#.into())
        );
    }
}
