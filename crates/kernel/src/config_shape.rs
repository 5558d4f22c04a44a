//! What each plugin's config takes, learned without running the plugin: in probe mode,
//! [`PluginConfig::parse`] hands the target type a recording deserializer that notes the
//! field names the type asks for and stops there. `dsh --dump-config-schema` prints the
//! result as JSON Schema.

use std::sync::{Arc, Mutex};

use serde::de::{self, Visitor};

use crate::context::Context;
use crate::plugin::{Catalog, LoadRow, PluginConfig};

/// What probing one row's plugin found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConfigShape {
    /// The config is an object with these keys (any other key is refused).
    Fields(Vec<&'static str>),
    /// The plugin reads its config as a whole and checks it itself.
    Checked,
    /// The plugin takes no config.
    Empty,
    /// The plugin stopped before reading its config (it needs a service first).
    Unknown(String),
}

pub(crate) type Slot = Arc<Mutex<Option<ConfigShape>>>;

/// The message a probed parse ends with (never shown to a user).
pub(crate) const PROBE_STOP: &str = "config shape recorded";

/// Records what a type's `Deserialize` asks for, then stops it.
pub(crate) struct Recorder<'a>(pub(crate) &'a Slot);

impl Recorder<'_> {
    fn record(&self, shape: ConfigShape) {
        let mut slot = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if slot.is_none() {
            *slot = Some(shape);
        }
    }
}

impl<'de> de::Deserializer<'de> for Recorder<'_> {
    type Error = de::value::Error;

    fn deserialize_any<V: Visitor<'de>>(self, _visitor: V) -> Result<V::Value, Self::Error> {
        self.record(ConfigShape::Checked);
        Err(de::Error::custom(PROBE_STOP))
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        _visitor: V,
    ) -> Result<V::Value, Self::Error> {
        self.record(ConfigShape::Fields(fields.to_vec()));
        Err(de::Error::custom(PROBE_STOP))
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        visitor.visit_some(self)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        visitor.visit_newtype_struct(self)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf unit unit_struct seq tuple tuple_struct map enum identifier ignored_any
    }
}

/// One row of a tree with its plugin's config shape.
#[derive(Clone, Debug)]
pub struct RowShape {
    /// JSON-pointer-like position in the tree (`/3`, `/7/children/0`).
    pub path: String,
    pub id: String,
    pub name: String,
    /// `None` for a group row (its rows follow it).
    pub shape: Option<ConfigShape>,
}

/// Probes every row of `rows` (groups included) under a throwaway child of `parent`.
pub fn probe_rows(parent: &Context, catalog: &Catalog, rows: &[LoadRow]) -> Vec<RowShape> {
    let scratch = parent.child("config-probe");
    let mut out = Vec::new();
    probe_into(&scratch, catalog, rows, "", &mut out);
    scratch.dispose();
    out
}

fn probe_into(
    parent: &Context,
    catalog: &Catalog,
    rows: &[LoadRow],
    prefix: &str,
    out: &mut Vec<RowShape>,
) {
    for (i, row) in rows.iter().enumerate() {
        let path = format!("{prefix}/{i}");
        if row.name == "cordis:group" {
            out.push(RowShape {
                path: path.clone(),
                id: row.id.clone(),
                name: row.name.clone(),
                shape: None,
            });
            probe_into(
                parent,
                catalog,
                &row.children,
                &format!("{path}/children"),
                out,
            );
            continue;
        }
        let shape = match catalog.lookup(&row.name) {
            None => ConfigShape::Unknown("no plugin of this name is compiled in".into()),
            Some(plugin) => {
                let slot: Slot = Arc::new(Mutex::new(None));
                let config = PluginConfig::probing(&row.id, &row.source, slot.clone());
                let ctx = parent.child(row.id.clone());
                let result = plugin.apply(&ctx, &config);
                ctx.dispose();
                let recorded = slot.lock().unwrap_or_else(|p| p.into_inner()).take();
                match (recorded, result) {
                    (Some(shape), _) => shape,
                    (None, Ok(())) => ConfigShape::Empty,
                    (None, Err(e)) => ConfigShape::Unknown(e.to_string()),
                }
            }
        };
        out.push(RowShape {
            path,
            id: row.id.clone(),
            name: row.name.clone(),
            shape: Some(shape),
        });
    }
}
