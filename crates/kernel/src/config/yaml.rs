//! A small YAML model for composition files: parse (keeping key order, line numbers and
//! `!!js` expressions) and emit (one loadable document, `!!js` unevaluated).

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;

use saphyr_parser::{Event, Parser, ScalarStyle, Span};

/// A YAML value as composition sees it.
#[derive(Clone, Debug, PartialEq)]
pub enum Node {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    Seq(Vec<Node>),
    /// Keys in document order.
    Map(Vec<(String, Node)>),
    /// A `!!js` expression, evaluated when the row loads.
    Js(String),
}

impl Node {
    pub fn get(&self, key: &str) -> Option<&Node> {
        match self {
            Node::Map(entries) => entries.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    pub fn get_mut(&mut self, key: &str) -> Option<&mut Node> {
        match self {
            Node::Map(entries) => entries.iter_mut().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    /// Sets `key`, keeping its position when present, appending otherwise.
    pub fn set(&mut self, key: &str, value: Node) {
        if let Node::Map(entries) = self {
            match entries.iter_mut().find(|(k, _)| k == key) {
                Some(slot) => slot.1 = value,
                None => entries.push((key.to_string(), value)),
            }
        }
    }

    /// Sets every `(key, value)` of `fields` in order, as [`Node::set`] would one by one,
    /// in time linear in both mappings.
    pub fn set_all(&mut self, fields: Vec<(String, Node)>) {
        let Node::Map(entries) = self else { return };
        let mut position: HashMap<String, usize> = entries
            .iter()
            .enumerate()
            .map(|(i, (k, _))| (k.clone(), i))
            .collect();
        for (key, value) in fields {
            match position.get(&key) {
                Some(&i) => entries[i].1 = value,
                None => {
                    position.insert(key.clone(), entries.len());
                    entries.push((key, value));
                }
            }
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Node::Str(s) => Some(s),
            _ => None,
        }
    }

    pub fn kind(&self) -> &'static str {
        match self {
            Node::Null => "null",
            Node::Bool(_) => "a boolean",
            Node::Int(_) | Node::Float(_) => "a number",
            Node::Str(_) => "a string",
            Node::Seq(_) => "a list",
            Node::Map(_) => "a mapping",
            Node::Js(_) => "a !!js expression",
        }
    }
}

/// A YAML syntax error with its 1-based position.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{message} at line {line}, column {column}")]
pub struct YamlError {
    pub message: String,
    pub line: usize,
    pub column: usize,
}

fn at(span: &Span, message: impl Into<String>) -> YamlError {
    YamlError {
        message: message.into(),
        line: span.start.line(),
        column: span.start.col() + 1,
    }
}

fn resolve_plain(text: &str) -> Node {
    match text {
        "" | "~" | "null" | "Null" | "NULL" => return Node::Null,
        "true" | "True" | "TRUE" => return Node::Bool(true),
        "false" | "False" | "FALSE" => return Node::Bool(false),
        _ => {}
    }
    let numeric = text.trim_start_matches(['-', '+']);
    if !numeric.is_empty()
        && numeric.bytes().all(|b| b.is_ascii_digit())
        && let Ok(i) = text.parse::<i64>()
    {
        return Node::Int(i);
    }
    if let Some(hex) = text.strip_prefix("0x")
        && let Ok(i) = i64::from_str_radix(hex, 16)
    {
        return Node::Int(i);
    }
    let looks_float = text.bytes().any(|b| b.is_ascii_digit())
        && text
            .bytes()
            .all(|b| b.is_ascii_digit() || matches!(b, b'.' | b'e' | b'E' | b'-' | b'+'));
    if looks_float && let Ok(f) = text.parse::<f64>() {
        return Node::Float(f);
    }
    match text {
        ".inf" | ".Inf" | "+.inf" => Node::Float(f64::INFINITY),
        "-.inf" | "-.Inf" => Node::Float(f64::NEG_INFINITY),
        _ => Node::Str(text.to_string()),
    }
}

/// Most nodes a document may expand to, aliases counted at their full size ("billion
/// laughs" documents are refused, not expanded).
pub const MAX_NODES: usize = 200_000;
/// Deepest nesting of collections in a document.
pub const MAX_DEPTH: usize = 128;

/// A collection being parsed.
enum Frame {
    Seq {
        items: Vec<Node>,
        anchor: usize,
        /// Nodes inside so far (aliases at their expanded size).
        size: usize,
    },
    Map {
        entries: Vec<(String, Node)>,
        /// The key read, waiting for its value.
        pending: Option<String>,
        /// Every key of `entries` (and `pending`), so a duplicate is found in constant
        /// time: scanning `entries` per key made large mappings quadratic.
        keys: HashSet<String>,
        anchor: usize,
        size: usize,
    },
}

impl Frame {
    fn size_mut(&mut self) -> &mut usize {
        match self {
            Frame::Seq { size, .. } | Frame::Map { size, .. } => size,
        }
    }
}

/// Parses one YAML document. An empty document (or only comments) yields `None`.
///
/// Linear in the input: each event is handled in constant time (amortized), except that
/// an anchored node is copied once and each alias copies what it names, both bounded by
/// [`MAX_NODES`].
pub fn parse(text: &str) -> Result<Option<Node>, YamlError> {
    let mut parser = Parser::new_from_str(text);
    // Anchored nodes with their expanded size.
    let mut anchors: HashMap<usize, (Node, usize)> = HashMap::new();
    let mut nodes = 0usize;
    let mut stack: Vec<Frame> = Vec::new();
    let mut root: Option<Node> = None;
    let mut documents = 0;
    while let Some(next) = parser.next_event() {
        let (event, span) = next.map_err(|e| YamlError {
            message: e.info().to_string(),
            line: e.marker().line(),
            column: e.marker().col() + 1,
        })?;
        // A completed node: the node, its anchor (0: none) and its expanded size.
        let completed: Option<(Node, usize, usize)> = match event {
            Event::StreamStart | Event::Nothing | Event::DocumentEnd => None,
            Event::StreamEnd => break,
            Event::DocumentStart(_) => {
                documents += 1;
                if documents > 1 {
                    return Err(at(&span, "only one YAML document is allowed"));
                }
                None
            }
            Event::Alias(id) => {
                let (node, size) = anchors
                    .get(&id)
                    .cloned()
                    .ok_or_else(|| at(&span, "unknown alias"))?;
                nodes = nodes.saturating_add(size);
                if nodes > MAX_NODES {
                    return Err(at(
                        &span,
                        format!("aliases expand the document beyond {MAX_NODES} nodes"),
                    ));
                }
                Some((node, 0, size))
            }
            Event::Scalar(value, style, anchor, tag) => {
                let node = match tag.as_deref() {
                    Some(t) if t.suffix == "js" => Node::Js(value.to_string()),
                    Some(t) if t.suffix == "str" => Node::Str(value.to_string()),
                    Some(t)
                        if t.suffix == "int"
                            || t.suffix == "float"
                            || t.suffix == "bool"
                            || t.suffix == "null" =>
                    {
                        resolve_plain(&value)
                    }
                    Some(t) => {
                        return Err(at(
                            &span,
                            format!("unsupported YAML tag \"{}{}\"", t.handle, t.suffix),
                        ));
                    }
                    None if style == ScalarStyle::Plain => resolve_plain(&value),
                    None => Node::Str(value.to_string()),
                };
                Some((node, anchor, 1))
            }
            Event::SequenceStart(anchor, _) => {
                check_depth(&stack, &span)?;
                stack.push(Frame::Seq {
                    items: Vec::new(),
                    anchor,
                    size: 1,
                });
                None
            }
            Event::MappingStart(anchor, _) => {
                check_depth(&stack, &span)?;
                stack.push(Frame::Map {
                    entries: Vec::new(),
                    pending: None,
                    keys: HashSet::new(),
                    anchor,
                    size: 1,
                });
                None
            }
            Event::SequenceEnd => match stack.pop() {
                Some(Frame::Seq {
                    items,
                    anchor,
                    size,
                }) => Some((Node::Seq(items), anchor, size)),
                _ => return Err(at(&span, "unbalanced sequence")),
            },
            Event::MappingEnd => match stack.pop() {
                Some(Frame::Map {
                    entries,
                    pending: None,
                    anchor,
                    size,
                    ..
                }) => Some((Node::Map(entries), anchor, size)),
                _ => return Err(at(&span, "unbalanced mapping")),
            },
        };
        let Some((node, anchor, size)) = completed else {
            continue;
        };
        nodes = nodes.saturating_add(1);
        if nodes > MAX_NODES {
            return Err(at(
                &span,
                format!("the document has more than {MAX_NODES} nodes"),
            ));
        }
        if anchor != 0 {
            anchors.insert(anchor, (node.clone(), size));
        }
        if let Some(parent) = stack.last_mut() {
            let total = parent.size_mut();
            *total = total.saturating_add(size);
        }
        attach(&mut stack, &mut root, node, &span)?;
    }
    Ok(root)
}

/// Puts a completed node where it belongs: the document root, the next item of the open
/// sequence, or the key or value of the open mapping's next entry.
fn attach(
    stack: &mut [Frame],
    root: &mut Option<Node>,
    node: Node,
    span: &Span,
) -> Result<(), YamlError> {
    match stack.last_mut() {
        None => *root = Some(node),
        Some(Frame::Seq { items, .. }) => items.push(node),
        Some(Frame::Map {
            entries,
            pending,
            keys,
            ..
        }) => match pending.take() {
            None => {
                let key = match node {
                    Node::Str(s) => s,
                    Node::Int(i) => i.to_string(),
                    Node::Bool(b) => b.to_string(),
                    Node::Null => "null".to_string(),
                    Node::Float(f) => f.to_string(),
                    _ => return Err(at(span, "mapping keys must be scalars")),
                };
                if !keys.insert(key.clone()) {
                    return Err(at(span, format!("duplicated mapping key \"{key}\"")));
                }
                *pending = Some(key);
            }
            Some(key) => entries.push((key, node)),
        },
    }
    Ok(())
}

fn check_depth(stack: &[Frame], span: &Span) -> Result<(), YamlError> {
    if stack.len() >= MAX_DEPTH {
        return Err(at(
            span,
            format!("collections nest deeper than {MAX_DEPTH} levels"),
        ));
    }
    Ok(())
}

// ------------------------------------------------------------------ emitting

fn needs_quotes(s: &str) -> bool {
    if s.is_empty() || s.trim() != s {
        return true;
    }
    if !matches!(resolve_plain(s), Node::Str(_)) {
        return true;
    }
    let first = s.chars().next().unwrap_or(' ');
    if "@`!&*?|>-'\"%{}[],#:~".contains(first)
        && !(first == '-' && s.len() > 1 && !s[1..].starts_with(' '))
    {
        return true;
    }
    s.contains(": ") || s.contains(" #") || s.ends_with(':') || s.chars().any(|c| c.is_control())
}

fn write_scalar_str(out: &mut String, s: &str) {
    if needs_quotes(s) {
        if s.chars().any(|c| c.is_control() && c != '\n') {
            out.push_str(&serde_json::to_string(s).unwrap_or_default());
        } else {
            out.push('\'');
            out.push_str(&s.replace('\'', "''"));
            out.push('\'');
        }
    } else {
        out.push_str(s);
    }
}

fn block_scalar(out: &mut String, s: &str, indent: usize) {
    let chomp = if s.ends_with("\n\n") {
        "+"
    } else if s.ends_with('\n') {
        ""
    } else {
        "-"
    };
    out.push('|');
    out.push_str(chomp);
    let body = s.strip_suffix('\n').unwrap_or(s);
    for line in body.split('\n') {
        out.push('\n');
        if !line.is_empty() {
            out.push_str(&" ".repeat(indent));
            out.push_str(line);
        }
    }
}

fn is_block_string(s: &str) -> bool {
    s.contains('\n') && !s.starts_with(' ') && !s.chars().any(|c| c.is_control() && c != '\n')
}

fn write_inline(out: &mut String, node: &Node, indent: usize) {
    match node {
        Node::Null => out.push_str("null"),
        Node::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Node::Int(i) => {
            let _ = write!(out, "{i}");
        }
        Node::Float(f) => {
            if f.is_infinite() {
                out.push_str(if *f > 0.0 { ".inf" } else { "-.inf" });
            } else if f.is_nan() {
                out.push_str(".nan");
            } else {
                crate::json::write_f64(out, *f);
                if f.fract() == 0.0 && f.abs() < 1e21 {
                    out.push_str(".0");
                }
            }
        }
        Node::Str(s) if is_block_string(s) => block_scalar(out, s, indent),
        Node::Str(s) => write_scalar_str(out, s),
        Node::Js(expr) => {
            out.push_str("!!js ");
            if is_block_string(expr) {
                block_scalar(out, expr, indent);
            } else {
                write_scalar_str(out, expr);
            }
        }
        Node::Seq(items) if items.is_empty() => out.push_str("[]"),
        Node::Map(entries) if entries.is_empty() => out.push_str("{}"),
        Node::Seq(_) | Node::Map(_) => {}
    }
}

fn is_collection(node: &Node) -> bool {
    matches!(node, Node::Seq(items) if !items.is_empty())
        || matches!(node, Node::Map(e) if !e.is_empty())
}

/// Writes `node` in block style at `indent` spaces.
fn write_block(out: &mut String, node: &Node, indent: usize) {
    let pad = " ".repeat(indent);
    match node {
        Node::Seq(items) if !items.is_empty() => {
            for (i, item) in items.iter().enumerate() {
                if i > 0 || !out.is_empty() && !out.ends_with('\n') {
                    out.push('\n');
                }
                out.push_str(&pad);
                out.push_str("- ");
                match item {
                    Node::Map(entries) if !entries.is_empty() => {
                        write_map_entries(out, entries, indent + 2, true);
                    }
                    Node::Seq(inner) if !inner.is_empty() => {
                        let mut nested = String::new();
                        write_block(&mut nested, item, indent + 2);
                        out.push_str(nested.trim_start());
                    }
                    _ => write_inline(out, item, indent + 2),
                }
            }
        }
        Node::Map(entries) if !entries.is_empty() => write_map_entries(out, entries, indent, false),
        other => {
            out.push_str(&pad);
            write_inline(out, other, indent);
        }
    }
}

fn write_map_entries(
    out: &mut String,
    entries: &[(String, Node)],
    indent: usize,
    first_inline: bool,
) {
    let pad = " ".repeat(indent);
    for (i, (key, value)) in entries.iter().enumerate() {
        if i > 0 || !first_inline {
            if !out.is_empty() && !out.ends_with('\n') {
                out.push('\n');
            }
            out.push_str(&pad);
        }
        write_scalar_str(out, key);
        out.push(':');
        if is_collection(value) {
            out.push('\n');
            let mut nested = String::new();
            write_block(&mut nested, value, indent + 2);
            out.push_str(&nested);
        } else {
            out.push(' ');
            write_inline(out, value, indent + 2);
        }
    }
}

/// Emits `node` as a block-style YAML document (no trailing newline).
pub fn emit(node: &Node) -> String {
    let mut out = String::new();
    write_block(&mut out, node, 0);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn parses_rows_with_js_and_nesting() {
        let text = "# comment\n- id: a\n  name: '@x/y'\n  config:\n    n: 3\n    f: 1.5\n    list: [1, two]\n    expr: !!js process.env.X ?? 'd'\n    off: false\n    none: ~\n";
        let node = parse(text).unwrap().unwrap();
        let Node::Seq(rows) = &node else { panic!() };
        let cfg = rows[0].get("config").unwrap();
        assert_eq!(cfg.get("n"), Some(&Node::Int(3)));
        assert_eq!(cfg.get("f"), Some(&Node::Float(1.5)));
        assert_eq!(
            cfg.get("list"),
            Some(&Node::Seq(vec![Node::Int(1), Node::Str("two".into())]))
        );
        assert_eq!(
            cfg.get("expr"),
            Some(&Node::Js("process.env.X ?? 'd'".into()))
        );
        assert_eq!(cfg.get("none"), Some(&Node::Null));
        assert_eq!(rows[0].get("name").and_then(Node::as_str), Some("@x/y"));
    }

    #[test]
    fn emitted_documents_parse_back_to_the_same_tree() {
        let text = "- id: a\n  name: '@x/y'\n  config:\n    persona: |\n      line one\n      line two\n    n: 3\n    f: 2.0\n    empty: []\n    s: 'true'\n    q: \"it's: here\"\n    nested:\n      - x: 1\n        y: [a, b]\n      - plain\n    js: !!js \"process.cwd()\"\n- id: b\n  name: plain-name\n  disabled: true\n";
        let node = parse(text).unwrap().unwrap();
        let emitted = emit(&node);
        let again = parse(&emitted).unwrap().unwrap();
        assert_eq!(again, node, "emitted:\n{emitted}");
    }

    #[test]
    fn duplicate_keys_are_refused_at_the_repeated_key_in_any_mapping() {
        let err = parse("a: 1\nb: 2\nc: 3\nb: 4\n").unwrap_err();
        assert_eq!(
            err,
            YamlError {
                message: "duplicated mapping key \"b\"".into(),
                line: 4,
                column: 1
            }
        );
        // Keys are compared after resolution (`1` and `'1'` are both "1"), per mapping.
        let err = parse("rows:\n  - {x: 1, y: 2}\n  - x: 1\n    1: a\n    '1': b\n").unwrap_err();
        assert_eq!((err.line, err.column), (5, 5), "{err}");
        assert!(err.message.contains("\"1\""), "{err}");
        // The same key in sibling and nested mappings is fine.
        let node = parse("a: {k: 1}\nb: {k: 2, a: {k: 3}}\n").unwrap().unwrap();
        assert_eq!(
            node.get("b").and_then(|b| b.get("a")),
            Some(&Node::Map(vec![("k".into(), Node::Int(3))]))
        );
        // Large mappings keep every key in order.
        let text: String = (0..5000).map(|i| format!("k{i}: {i}\n")).collect();
        let Node::Map(entries) = parse(&text).unwrap().unwrap() else {
            panic!()
        };
        assert_eq!(entries.len(), 5000);
        assert_eq!(entries[4999], ("k4999".to_string(), Node::Int(4999)));
    }

    #[test]
    fn set_all_assigns_like_set_in_order() {
        let mut a = parse("x: 1\ny: 2\n").unwrap().unwrap();
        let mut b = a.clone();
        let fields = vec![
            ("y".to_string(), Node::Int(20)),
            ("z".to_string(), Node::Int(3)),
            ("x".to_string(), Node::Null),
            ("z".to_string(), Node::Int(30)),
        ];
        for (k, v) in fields.clone() {
            a.set(&k, v);
        }
        b.set_all(fields);
        assert_eq!(a, b);
    }

    #[test]
    fn syntax_errors_have_positions() {
        let err = parse("- id: a\n  name: [unclosed\n").unwrap_err();
        assert!(err.line >= 2, "{err}");
        assert!(parse("# only a comment\n").unwrap().is_none());
        assert!(parse("a: 1\na: 2\n").is_err());
    }
}

#[cfg(test)]
mod bounds {
    use super::*;

    #[test]
    fn alias_bombs_and_deep_nesting_are_refused() {
        // Nine levels of ten aliases each would expand to 10^9 nodes.
        let mut doc = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
        for i in 1..9 {
            let refs = vec![format!("*a{}", i - 1); 10].join(", ");
            doc.push_str(&format!("a{i}: &a{i} [{refs}]\n"));
        }
        let err = parse(&doc).unwrap_err();
        assert!(err.message.contains("aliases expand"), "{err}");
        let deep = format!("{}x{}", "[".repeat(10_000), "]".repeat(10_000));
        let err = parse(&deep).unwrap_err();
        assert!(err.message.contains("recursion limit"), "{err}");
        let mut block = String::new();
        for i in 0..200 {
            block.push_str(&format!("{}k{i}:\n", "  ".repeat(i)));
        }
        let err = parse(&block).unwrap_err();
        assert!(err.message.contains("nest deeper"), "{err}");
        // Ordinary anchors still work.
        let node = parse("base: &b {k: 1}\nother: *b\n").unwrap().unwrap();
        assert_eq!(node.get("other"), node.get("base"));
    }
}
