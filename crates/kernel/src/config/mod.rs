//! Composition from config rows: YAML layers, patches, `!!js` evaluation and dumps.

mod compose;
mod expr;
mod file;
mod yaml;

pub use compose::{
    ComposedRow, Composition, ConfigError, INCLUDE_PLUGIN, Layer, compose, render_dump,
    to_load_rows,
};
pub use expr::{EvalEnv, JsValue, evaluate};
pub use file::{
    ConfigFileError, DEFAULT_MAX_CONFIG_BYTES, MAX_CONFIG_BYTES_ENV, byte_limit_from_env,
    max_config_bytes, read_config_file, read_config_file_within, read_text_bounded,
};
pub use yaml::{Node, YamlError, emit, parse};
