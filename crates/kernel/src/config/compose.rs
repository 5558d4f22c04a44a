//! Composition: a plugin tree built from layered patch files, as upstream boots it.
//!
//! Every layer is a top-level YAML list of patch entries, applied in order over an empty
//! tree (bundles, then the profile patch, the home patch, and `--patch` files):
//!
//! * `- insert: [rows]` appends rows at the top level;
//! * `- id: G` + `insert: [rows]` appends rows inside group `G`;
//! * `- id: X` + other keys assigns those keys onto row `X` — `config` is replaced whole
//!   (no deep merge); a `name` key only guards (a mismatch skips the entry with a warning).
//!
//! A patch naming an id that is not in the tree is not fatal: one warning naming the layer.
//!
//! A row named `@deepseek-ai/cordis-plugin-include` (config `{path, patches}`) stands for
//! the rows of another file, an *entry list* (rows, not patch entries) read when the row is
//! composed: `path` resolves against the directory of the file that holds the row, `patches`
//! apply to the included rows only, and the included rows load in place of the include row.
//! As upstream has it, patches outside an include do not reach the rows inside it (an include
//! nested in an include is reached by neither). A missing file, a cycle and runaway nesting
//! are errors naming the row.

use std::path::{Component, Path, PathBuf};

use serde_json::{Map, Number, Value};

use super::expr::{EvalEnv, JsValue, evaluate};
use super::yaml::{Node, emit, parse};
use crate::plugin::LoadRow;

/// The row name of a file include.
pub const INCLUDE_PLUGIN: &str = "@deepseek-ai/cordis-plugin-include";

/// How deep includes may nest.
const MAX_INCLUDE_DEPTH: usize = 16;
/// How many files one composition may include in all (diamonds count each time).
const MAX_INCLUDED_FILES: usize = 256;
/// The largest included file.
const MAX_INCLUDE_BYTES: u64 = 4 << 20;
/// The file kinds an include reads (as upstream's include: YAML or JSON).
const INCLUDE_EXTENSIONS: [&str; 3] = ["yml", "yaml", "json"];

/// One parsed patch file.
#[derive(Clone, Debug)]
pub struct Layer {
    /// How dumps and warnings name the layer (a package name or an absolute path).
    pub label: String,
    /// The file the entries came from (for error messages).
    pub file: String,
    pub entries: Vec<Node>,
    /// The directory relative include paths resolve against: the directory of `file` when
    /// `file` is an absolute path, none for built-in layers.
    pub dir: Option<PathBuf>,
}

/// A composition file could not be used.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ConfigError {
    #[error("failed to parse {file}: {message}")]
    Parse { file: String, message: String },
    #[error("{file} must be a top-level YAML list of patch entries")]
    NotAList { file: String },
    #[error("entry {index} in {file} must be a mapping (a patch entry)")]
    EntryNotMapping { file: String, index: usize },
    #[error("{file}: row {index} needs a string `{field}`")]
    RowField {
        file: String,
        index: usize,
        field: &'static str,
    },
    #[error("{file}: duplicate row id \"{id}\"")]
    DuplicateId { file: String, id: String },
    #[error("{file}: row \"{row}\": field `{field}`: {message}")]
    Expression {
        file: String,
        row: String,
        field: String,
        message: String,
    },
    #[error("{file}: row \"{row}\": `{field}` must be {expected}, not {found}")]
    RowType {
        file: String,
        row: String,
        field: String,
        expected: &'static str,
        found: &'static str,
    },
    #[error("{file}: row \"{row}\" ({INCLUDE_PLUGIN}): {message}")]
    Include {
        file: String,
        row: String,
        message: String,
    },
}

impl Layer {
    /// Parses a patch file's text. Empty or comment-only text is an error (write `[]` for an
    /// empty layer).
    pub fn parse(
        label: impl Into<String>,
        file: impl Into<String>,
        text: &str,
    ) -> Result<Self, ConfigError> {
        let file = file.into();
        let node = parse(text).map_err(|e| ConfigError::Parse {
            file: file.clone(),
            message: e.to_string(),
        })?;
        let Some(Node::Seq(entries)) = node else {
            return Err(ConfigError::NotAList { file });
        };
        for (i, e) in entries.iter().enumerate() {
            if !matches!(e, Node::Map(_)) {
                return Err(ConfigError::EntryNotMapping { file, index: i + 1 });
            }
        }
        let path = Path::new(&file);
        let dir = path
            .is_absolute()
            .then(|| path.parent().map(Path::to_path_buf))
            .flatten();
        Ok(Self {
            label: label.into(),
            file,
            entries,
            dir,
        })
    }

    /// Parses an *entry list*: a file of rows (what an include reads, and upstream's
    /// composition files), as one layer that inserts them.
    pub fn parse_rows(
        label: impl Into<String>,
        file: impl Into<String>,
        text: &str,
    ) -> Result<Self, ConfigError> {
        let mut layer = Self::parse(label, file, text)?;
        let rows = std::mem::take(&mut layer.entries);
        layer.entries = vec![Node::Map(vec![("insert".into(), Node::Seq(rows))])];
        Ok(layer)
    }
}

/// A row of the composed tree with its provenance.
#[derive(Clone, Debug, PartialEq)]
pub struct ComposedRow {
    /// The row mapping (`id`, `name`, `config`, `disabled`, …) in key order.
    pub node: Node,
    /// Label of the layer that inserted the row.
    pub origin: String,
    /// File that inserted the row.
    pub origin_file: String,
    /// Labels of layers that changed the row, in application order.
    pub patched_by: Vec<String>,
    /// File that last set the row's `config`.
    pub config_file: String,
    /// Children of a group row (`group: true`), composed the same way; for an include row,
    /// the included rows with the include's patches applied.
    pub children: Vec<ComposedRow>,
    /// For an include row: the file it included.
    pub included: Option<PathBuf>,
}

impl ComposedRow {
    pub fn id(&self) -> &str {
        self.node.get("id").and_then(Node::as_str).unwrap_or("")
    }

    pub fn name(&self) -> &str {
        self.node.get("name").and_then(Node::as_str).unwrap_or("")
    }

    pub fn is_group(&self) -> bool {
        matches!(self.node.get("group"), Some(Node::Bool(true))) || self.name() == "cordis:group"
    }

    /// Whether the row includes another file's rows.
    pub fn is_include(&self) -> bool {
        self.name() == INCLUDE_PLUGIN
    }

    /// The row mapping with group children written back into `config`.
    pub fn to_node(&self) -> Node {
        let mut node = self.node.clone();
        if self.is_group() {
            node.set(
                "config",
                Node::Seq(self.children.iter().map(ComposedRow::to_node).collect()),
            );
        }
        node
    }
}

/// The composed tree plus the warnings composition produced.
#[derive(Clone, Debug, Default)]
pub struct Composition {
    pub rows: Vec<ComposedRow>,
    pub warnings: Vec<String>,
}

/// The includes being expanded: the chain of files (for cycles and depth), how many files
/// were read, and the warnings their patches produced.
#[derive(Default)]
struct Includes {
    chain: Vec<PathBuf>,
    files: usize,
    warnings: Vec<String>,
}

fn include_err(file: &str, row: &str, message: impl Into<String>) -> ConfigError {
    ConfigError::Include {
        file: file.to_string(),
        row: row.to_string(),
        message: message.into(),
    }
}

/// Reads and composes the file `row` includes (its config from `layer`, whose directory
/// relative paths resolve against), with the include's patches applied.
fn expand_include(
    row: &mut ComposedRow,
    layer: &Layer,
    includes: &mut Includes,
) -> Result<(), ConfigError> {
    let id = row.id().to_string();
    let err = |message: String| include_err(&layer.file, &id, message);
    let config = row.node.get("config");
    let path = match config.and_then(|c| c.get("path")) {
        Some(Node::Str(p)) if !p.is_empty() => p.clone(),
        Some(Node::Js(_)) => {
            return Err(err(
                "`path` must be a literal file path (an include reads it when the tree is composed, before any `!!js` runs)".into(),
            ));
        }
        Some(other) => {
            return Err(err(format!(
                "`path` must be a string naming a YAML or JSON file, not {}",
                other.kind()
            )));
        }
        None => {
            return Err(err(
                "config needs `path`, the YAML or JSON file to include".into()
            ));
        }
    };
    let ext = Path::new(&path)
        .extension()
        .and_then(|e| e.to_str())
        .unwrap_or("");
    if !INCLUDE_EXTENSIONS.contains(&ext) {
        return Err(err(format!(
            "cannot include \"{path}\": only .yml, .yaml and .json files hold rows"
        )));
    }
    let target = if Path::new(&path).is_absolute() {
        PathBuf::from(&path)
    } else {
        match &layer.dir {
            Some(dir) => dir.join(&path),
            None => {
                return Err(err(format!(
                    "cannot resolve \"{path}\": the layer is built in and has no directory (use an absolute path, or include from a file)"
                )));
            }
        }
    };
    let target = normalize(&target);
    let shown = target.display().to_string();
    if let Some(at) = includes.chain.iter().position(|p| *p == target) {
        let cycle: Vec<String> = includes.chain[at..]
            .iter()
            .chain(std::iter::once(&target))
            .map(|p| p.display().to_string())
            .collect();
        return Err(err(format!("include cycle: {}", cycle.join(" -> "))));
    }
    if includes.chain.len() >= MAX_INCLUDE_DEPTH {
        return Err(err(format!(
            "includes nest more than {MAX_INCLUDE_DEPTH} files deep at {shown}"
        )));
    }
    includes.files += 1;
    if includes.files > MAX_INCLUDED_FILES {
        return Err(err(format!(
            "the composition includes more than {MAX_INCLUDED_FILES} files"
        )));
    }
    let text = read_bounded(&target).map_err(|e| err(format!("cannot read {shown}: {e}")))?;
    let included = Layer::parse_rows(shown.clone(), shown.clone(), &text)?;
    let patches = match config.and_then(|c| c.get("patches")) {
        None | Some(Node::Null) => Vec::new(),
        Some(Node::Seq(items)) => {
            if let Some(i) = items.iter().position(|e| !matches!(e, Node::Map(_))) {
                return Err(err(format!(
                    "patch {} of `patches` must be a mapping (a patch entry)",
                    i + 1
                )));
            }
            items.clone()
        }
        Some(other) => {
            return Err(err(format!(
                "`patches` must be a list of patch entries, not {}",
                other.kind()
            )));
        }
    };
    // The patches' rows join the included tree, so paths in them resolve as the included
    // file's do; errors still name the file the patches are written in.
    let patch_layer = Layer {
        label: format!("{} (row \"{id}\")", layer.label),
        file: layer.file.clone(),
        entries: patches,
        dir: target.parent().map(Path::to_path_buf),
    };
    includes.chain.push(target.clone());
    let composed = compose_layers(&[included, patch_layer], includes);
    includes.chain.pop();
    let composed = composed?;
    includes.warnings.extend(composed.warnings);
    row.children = composed.rows;
    row.included = Some(target);
    Ok(())
}

/// `path` without `.` and with `..` applied lexically (symlinks are not resolved, so a
/// cycle through a symlink is caught by the depth bound instead).
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

fn read_bounded(path: &Path) -> std::io::Result<String> {
    use std::io::Read;
    let file = std::fs::File::open(path)?;
    let mut text = String::new();
    file.take(MAX_INCLUDE_BYTES + 1).read_to_string(&mut text)?;
    if text.len() as u64 > MAX_INCLUDE_BYTES {
        return Err(std::io::Error::other(format!(
            "larger than {MAX_INCLUDE_BYTES} bytes"
        )));
    }
    Ok(text)
}

fn make_row(
    node: &Node,
    layer: &Layer,
    index: usize,
    includes: &mut Includes,
) -> Result<ComposedRow, ConfigError> {
    let str_field = |field: &'static str| -> Result<String, ConfigError> {
        node.get(field)
            .and_then(Node::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .ok_or(ConfigError::RowField {
                file: layer.file.clone(),
                index: index + 1,
                field,
            })
    };
    let id = str_field("id")?;
    let _name = str_field("name")?;
    let mut row = ComposedRow {
        node: node.clone(),
        origin: layer.label.clone(),
        origin_file: layer.file.clone(),
        patched_by: Vec::new(),
        config_file: layer.file.clone(),
        children: Vec::new(),
        included: None,
    };
    if row.is_include() {
        expand_include(&mut row, layer, includes)?;
    } else if row.is_group() {
        let children = match node.get("config") {
            Some(Node::Seq(items)) => items.clone(),
            None | Some(Node::Null) => Vec::new(),
            Some(other) => {
                return Err(ConfigError::RowType {
                    file: layer.file.clone(),
                    row: id,
                    field: "config".into(),
                    expected: "a list of rows (group)",
                    found: other.kind(),
                });
            }
        };
        row.children = children
            .iter()
            .enumerate()
            .map(|(i, c)| make_row(c, layer, i, includes))
            .collect::<Result<_, _>>()?;
        check_unique(&row.children, &layer.file)?;
    }
    Ok(row)
}

/// The first repeated id among `rows` is an error (a hash set: comparing every pair made
/// layers with many rows quadratic).
fn check_unique(rows: &[ComposedRow], file: &str) -> Result<(), ConfigError> {
    let mut seen = std::collections::HashSet::with_capacity(rows.len());
    for r in rows {
        if !seen.insert(r.id()) {
            return Err(ConfigError::DuplicateId {
                file: file.to_string(),
                id: r.id().to_string(),
            });
        }
    }
    Ok(())
}

/// The row `id`, searched through groups but not into includes (their rows answer only to
/// the include's own patches).
fn find_mut<'a>(rows: &'a mut [ComposedRow], id: &str) -> Option<&'a mut ComposedRow> {
    for r in rows.iter_mut() {
        if r.id() == id {
            return Some(r);
        }
        if r.is_include() {
            continue;
        }
        if let Some(found) = find_mut(&mut r.children, id) {
            return Some(found);
        }
    }
    None
}

/// Applies `layers` in order over an empty tree.
pub fn compose(layers: &[Layer]) -> Result<Composition, ConfigError> {
    let mut includes = Includes::default();
    let mut out = compose_layers(layers, &mut includes)?;
    out.warnings.append(&mut includes.warnings);
    Ok(out)
}

fn compose_layers(layers: &[Layer], includes: &mut Includes) -> Result<Composition, ConfigError> {
    let mut out = Composition::default();
    for layer in layers {
        for (index, entry) in layer.entries.iter().enumerate() {
            let id = entry.get("id").and_then(Node::as_str).map(str::to_owned);
            let insert = entry.get("insert");
            match (id, insert) {
                (None, Some(Node::Seq(rows))) => {
                    for (i, r) in rows.iter().enumerate() {
                        out.rows.push(make_row(r, layer, i, includes)?);
                    }
                    check_unique(&out.rows, &layer.file)?;
                }
                (Some(group), Some(Node::Seq(rows))) => match find_mut(&mut out.rows, &group) {
                    Some(g) if g.is_group() => {
                        for (i, r) in rows.iter().enumerate() {
                            g.children.push(make_row(r, layer, i, includes)?);
                        }
                        check_unique(&g.children, &layer.file)?;
                        if !g.patched_by.contains(&layer.label) {
                            g.patched_by.push(layer.label.clone());
                        }
                    }
                    Some(_) => out.warnings.push(format!(
                        "[{}] patch insert: entry \"{group}\" is not a group",
                        layer.label
                    )),
                    None => out.warnings.push(format!(
                        "[{}] patch insert: entry \"{group}\" not found",
                        layer.label
                    )),
                },
                (_, Some(other)) => {
                    return Err(ConfigError::RowType {
                        file: layer.file.clone(),
                        row: format!("entry {}", index + 1),
                        field: "insert".into(),
                        expected: "a list of rows",
                        found: other.kind(),
                    });
                }
                (None, None) => out.warnings.push(format!(
                    "[{}] patch: id is required for non-insert patches",
                    layer.label
                )),
                (Some(id), None) => {
                    let Some(row) = find_mut(&mut out.rows, &id) else {
                        out.warnings
                            .push(format!("[{}] patch: entry \"{id}\" not found", layer.label));
                        continue;
                    };
                    if let Some(name) = entry.get("name").and_then(Node::as_str)
                        && name != row.name()
                    {
                        out.warnings.push(format!(
                            "[{}] patch: name mismatch for \"{id}\" (expected \"{}\", got \"{name}\"), skipping",
                            layer.label,
                            row.name()
                        ));
                        continue;
                    }
                    let before = row.to_node();
                    let Node::Map(fields) = entry else { continue };
                    let assigned: Vec<(String, Node)> = fields
                        .iter()
                        .filter(|(key, _)| !matches!(key.as_str(), "id" | "name" | "insert"))
                        .cloned()
                        .collect();
                    let sets_config = assigned.iter().any(|(key, _)| key == "config");
                    row.node.set_all(assigned);
                    if sets_config {
                        row.config_file = layer.file.clone();
                        if row.is_include() {
                            // The include now reads what this layer's config names.
                            expand_include(row, layer, includes)?;
                        } else if row.is_group() {
                            let fresh = make_row(&row.node, layer, index, includes)?;
                            row.children = fresh.children;
                        }
                    }
                    if row.to_node() != before && !row.patched_by.contains(&layer.label) {
                        row.patched_by.push(layer.label.clone());
                    }
                }
            }
        }
    }
    Ok(out)
}

/// Renders the composed tree as one loadable YAML document: runs of rows with the same
/// provenance are preceded by `# == <origin>[, patched by <layers>]`.
pub fn render_dump(composition: &Composition) -> String {
    let mut out = String::new();
    let mut run: Vec<Node> = Vec::new();
    let mut run_label = String::new();
    let flush = |out: &mut String, run: &mut Vec<Node>, label: &str| {
        if run.is_empty() {
            return;
        }
        out.push_str("# == ");
        out.push_str(label);
        out.push('\n');
        out.push_str(emit(&Node::Seq(std::mem::take(run))).trim_end());
        out.push('\n');
    };
    for row in &composition.rows {
        let label = if row.patched_by.is_empty() {
            row.origin.clone()
        } else {
            format!("{}, patched by {}", row.origin, row.patched_by.join(", "))
        };
        if label != run_label {
            flush(&mut out, &mut run, &run_label);
            run_label = label;
        }
        run.push(row.to_node());
    }
    flush(&mut out, &mut run, &run_label);
    if out.is_empty() {
        out.push('\n');
    }
    out
}

fn to_json(node: &Node, env: &EvalEnv) -> Result<Option<Value>, String> {
    Ok(Some(match node {
        Node::Null => Value::Null,
        Node::Bool(b) => Value::Bool(*b),
        Node::Int(i) => Value::from(*i),
        Node::Float(f) => Number::from_f64(*f)
            .map(Value::Number)
            .ok_or("numbers must be finite")?,
        Node::Str(s) => Value::String(s.clone()),
        Node::Seq(items) => {
            let mut out = Vec::with_capacity(items.len());
            for i in items {
                out.push(to_json(i, env)?.unwrap_or(Value::Null));
            }
            Value::Array(out)
        }
        Node::Map(entries) => {
            let mut m = Map::new();
            for (k, v) in entries {
                if let Some(v) = to_json(v, env).map_err(|e| format!("{k}: {e}"))? {
                    m.insert(k.clone(), v);
                }
            }
            Value::Object(m)
        }
        Node::Js(expr) => match evaluate(expr, env).map_err(|e| format!("!!js `{expr}`: {e}"))? {
            JsValue::Undefined => return Ok(None),
            JsValue::Json(v) => v,
        },
    }))
}

/// Evaluates the enabled rows into loadable rows (groups keep their children).
pub fn to_load_rows(rows: &[ComposedRow], env: &EvalEnv) -> Result<Vec<LoadRow>, ConfigError> {
    let mut out = Vec::new();
    for row in rows {
        let expr_err = |field: &str, message: String| ConfigError::Expression {
            file: row.config_file.clone(),
            row: row.id().to_string(),
            field: field.to_string(),
            message,
        };
        let disabled = match row.node.get("disabled") {
            None | Some(Node::Null) => false,
            Some(Node::Bool(b)) => *b,
            Some(Node::Js(expr)) => {
                match evaluate(expr, env).map_err(|e| expr_err("disabled", e))? {
                    JsValue::Undefined
                    | JsValue::Json(Value::Null)
                    | JsValue::Json(Value::Bool(false)) => false,
                    JsValue::Json(Value::Bool(true)) => true,
                    JsValue::Json(other) => {
                        return Err(expr_err(
                            "disabled",
                            format!("evaluated to {other}, not a boolean"),
                        ));
                    }
                }
            }
            Some(other) => {
                return Err(ConfigError::RowType {
                    file: row.origin_file.clone(),
                    row: row.id().to_string(),
                    field: "disabled".into(),
                    expected: "a boolean",
                    found: other.kind(),
                });
            }
        };
        if disabled {
            continue;
        }
        if row.is_include() {
            // The included rows load in place of the include row, so a row in it may wait
            // for a service any row of the tree provides (as upstream's loader lets it).
            out.extend(to_load_rows(&row.children, env)?);
            continue;
        }
        if row.is_group() {
            out.push(LoadRow {
                id: row.id().to_string(),
                name: "cordis:group".to_string(),
                source: row.config_file.clone(),
                config: Value::Null,
                children: to_load_rows(&row.children, env)?,
            });
            continue;
        }
        let config = match row.node.get("config") {
            None => Value::Null,
            Some(node) => to_json(node, env)
                .map_err(|e| expr_err("config", e))?
                .unwrap_or(Value::Null),
        };
        out.push(LoadRow {
            id: row.id().to_string(),
            name: row.name().to_string(),
            source: row.config_file.clone(),
            config,
            children: Vec::new(),
        });
    }
    Ok(out)
}
