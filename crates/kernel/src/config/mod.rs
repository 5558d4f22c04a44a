//! Composition from config rows: YAML layers, patches, `!!js` evaluation and dumps.

mod compose;
mod expr;
mod yaml;

pub use compose::{
    ComposedRow, Composition, ConfigError, INCLUDE_PLUGIN, Layer, compose, render_dump,
    to_load_rows,
};
pub use expr::{EvalEnv, JsValue, evaluate};
pub use yaml::{Node, YamlError, emit, parse};
