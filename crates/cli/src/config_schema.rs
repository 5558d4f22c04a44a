//! `dsh --dump-config-schema`: a JSON Schema (draft 2020-12) of the profile's composed
//! tree (the rows `--dump-config` prints) and of the patches that change it, with each
//! row's config as its plugin reads it. Plugins are probed, not run: a plugin's config
//! parser reports the keys it takes (see `dsh_kernel::config_shape`).

use std::collections::BTreeMap;

use dsh_kernel::config::{ComposedRow, Composition};
use dsh_kernel::config_shape::{ConfigShape, RowShape, probe_rows};
use dsh_kernel::{Catalog, Context, LoadRow};
use serde_json::{Map, Value, json};

fn load_rows(rows: &[ComposedRow]) -> Vec<LoadRow> {
    rows.iter()
        .map(|row| {
            let nested = row.is_group() || row.is_include();
            LoadRow {
                id: row.id().to_string(),
                name: if nested {
                    "cordis:group".to_string()
                } else {
                    row.name().to_string()
                },
                source: row.origin_file.clone(),
                config: Value::Null,
                children: load_rows(&row.children),
            }
        })
        .collect()
}

/// Probes every row of `composition` with the compiled-in plugins: first each on its own;
/// a plugin that needs another's service before it reads its config is probed again
/// inside the profile's loaded tree. There, a plugin that registers what the tree already
/// has before reading any config takes none (the loader refuses keys it never reads).
pub fn probe(
    home: &std::path::Path,
    catalog: &Catalog,
    composition: &Composition,
) -> Result<Vec<RowShape>, String> {
    let rows = load_rows(&composition.rows);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("dsh: cannot start the runtime: {e}"))?;
    Ok(runtime.block_on(async {
        let root = Context::new_root();
        let mut shapes = probe_rows(&root, catalog, &rows);
        let unknown = |s: &RowShape| matches!(s.shape, Some(ConfigShape::Unknown(_)));
        if shapes.iter().any(unknown) {
            // The values the apps pass to their trees at startup, empty: nothing runs.
            let mut startup = Map::new();
            startup.insert("headlessStartup".into(), json!({"task": ""}));
            startup.insert("webStartup".into(), json!({}));
            let env = crate::boot::eval_env(home, startup);
            match crate::boot::load(&root, catalog, composition, &env) {
                Ok(tree) => {
                    let again = probe_rows(tree.context(), catalog, &rows);
                    for (shape, second) in shapes.iter_mut().zip(again) {
                        if !unknown(shape) {
                            continue;
                        }
                        shape.shape = match second.shape {
                            Some(ConfigShape::Unknown(why)) if why.contains("already") => {
                                Some(ConfigShape::Empty)
                            }
                            other => other,
                        };
                    }
                    tree.unload();
                }
                Err(e) => eprintln!("{e}; some rows could not be probed"),
            }
        }
        root.dispose();
        shapes
    }))
}

fn config_def(
    shape: &ConfigShape,
    not_taken: &[(&str, &str)],
    without_effect: &[(&str, &str)],
) -> (Value, &'static str) {
    let mut def = match shape {
        ConfigShape::Fields(fields) => {
            let properties: Map<String, Value> = fields
                .iter()
                .map(|f| ((*f).to_string(), json!({})))
                .collect();
            (
                json!({"type": ["object", "null"], "properties": properties, "additionalProperties": false}),
                "schema",
            )
        }
        ConfigShape::Checked => (
            json!({"description": "the plugin checks this config itself when it loads"}),
            "checked",
        ),
        ConfigShape::Empty => (
            json!({"type": ["object", "null"], "maxProperties": 0, "description": "this plugin takes no config"}),
            "none",
        ),
        ConfigShape::Unknown(why) => (
            json!({"description": format!("not probed: {why}")}),
            "unknown",
        ),
    };
    let listed = |keys: &[(&str, &str)]| -> Value {
        keys.iter()
            .map(|(k, why)| ((*k).to_string(), Value::from(*why)))
            .collect::<Map<String, Value>>()
            .into()
    };
    if !not_taken.is_empty() {
        def.0["x-upstream-keys-not-implemented"] = listed(not_taken);
    }
    if !without_effect.is_empty() {
        def.0["x-upstream-keys-without-effect"] = listed(without_effect);
        if let Some(props) = def.0["properties"].as_object_mut() {
            for (k, why) in without_effect {
                props.insert(
                    (*k).to_string(),
                    json!({"description": format!("accepted without effect: {why}")}),
                );
            }
        }
    }
    def
}

/// The ids of rows switched off with a literal `disabled: true` (a `!!js` condition is
/// decided at boot).
pub fn disabled_rows(rows: &[ComposedRow], out: &mut std::collections::HashSet<String>) {
    for row in rows {
        if matches!(
            row.node.get("disabled"),
            Some(dsh_kernel::config::Node::Bool(true))
        ) {
            out.insert(row.id().to_string());
        }
        disabled_rows(&row.children, out);
    }
}

/// The schema document for `profile`.
pub fn render(
    profile: &str,
    catalog: &Catalog,
    shapes: &[RowShape],
    disabled: &std::collections::HashSet<String>,
) -> Value {
    let mut defs = Map::new();
    defs.insert(
        "entryList".into(),
        json!({"type": "array", "items": {"$ref": "#/$defs/entry"}}),
    );
    defs.insert(
        "patchList".into(),
        json!({
            "description": "A patch layer (a profile's cordis.patch.yml, $DSH_HOME/cordis.patch.yml, --patch): entries that change rows by id, or insert rows.",
            "type": "array",
            "items": {"$ref": "#/$defs/patch"},
        }),
    );
    defs.insert(
        "patch".into(),
        json!({
            "type": "object",
            "properties": {
                "id": {"type": "string", "description": "the row to change, or the group to insert into"},
                "name": {"type": "string", "description": "when given, must match the row's plugin (else the patch is skipped with a warning)"},
                "disabled": {"description": "true, false, or a !!js expression"},
                "config": {"description": "replaces the row's whole config; see the row's plugin in #/$defs/entry"},
                "insert": {"$ref": "#/$defs/entryList"},
            },
        }),
    );
    let mut by_plugin: BTreeMap<String, (String, &'static str)> = BTreeMap::new();
    let mut entries = Vec::new();
    let mut cases = Vec::new();
    for row in shapes {
        let Some(shape) = &row.shape else {
            entries
                .push(json!({"path": row.path, "id": row.id, "name": row.name, "status": "group"}));
            continue;
        };
        let (reference, status) = match by_plugin.get(&row.name) {
            Some(known) => known.clone(),
            None => {
                let plugin = catalog.lookup(&row.name);
                let not_taken = plugin
                    .as_ref()
                    .map_or(&[][..], |p| p.upstream_keys_not_taken());
                let without_effect = plugin
                    .as_ref()
                    .map_or(&[][..], |p| p.upstream_keys_without_effect());
                let (def, status) = config_def(shape, not_taken, without_effect);
                let name = format!("config{}", by_plugin.len());
                defs.insert(name.clone(), def);
                let reference = format!("#/$defs/{name}");
                cases.push(json!({
                    "if": {"properties": {"name": {"const": row.name}}, "required": ["name"]},
                    "then": {"properties": {"config": {"$ref": reference}}},
                }));
                by_plugin.insert(row.name.clone(), (reference.clone(), status));
                (reference, status)
            }
        };
        let mut entry = json!({"path": row.path, "id": row.id, "name": row.name, "status": status, "configRef": reference});
        if disabled.contains(&row.id) {
            entry["disabled"] = Value::Bool(true);
        }
        if let ConfigShape::Unknown(why) = shape {
            entry["reason"] = Value::from(why.as_str());
        }
        entries.push(entry);
    }
    defs.insert(
        "entry".into(),
        json!({
            "type": "object",
            "required": ["name"],
            "properties": {
                "id": {"type": "string"},
                "name": {"type": "string", "description": "the plugin, e.g. @deepseek-ai/dsh-tool-bash; cordis:group holds rows in its config"},
                "disabled": {"description": "true, false, or a !!js expression"},
                "group": {"type": "boolean"},
                "config": {},
            },
            "allOf": cases,
        }),
    );
    json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": format!("dsh configuration of profile {profile}"),
        "description": "The composed row list `dsh --dump-config` prints; $defs.patchList describes a patch layer. !!js values are expressions evaluated when the profile boots, so this schema cannot check them.",
        "type": "array",
        "items": {"$ref": "#/$defs/entry"},
        "$defs": defs,
        "x-cordis": {"profile": profile, "entries": entries},
    })
}
