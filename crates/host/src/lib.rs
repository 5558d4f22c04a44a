//! What dsh needs from the machine it runs on, below every capability: the Harness home,
//! settings and credentials (with their plugins and stores), the secret registry that keeps
//! credentials out of child processes, logs and tool output, and crash-safe file writes.
//! Providers, tools and front ends take these from here instead of from the policy or
//! sandbox crates.

pub mod config;
mod credentials_doc;
mod credentials_store;
pub mod environ;
pub mod fs;
pub mod redact;
pub mod secrets;
mod settings_store;

pub use config::{
    Credentials, CredentialsPlugin, DefaultModel, DefaultModelPlugin, Settings, SettingsPlugin,
    absolute_path, dsh_home, layer, parse_dotenv, read_yaml_file,
};
pub use credentials_store::{CredentialSource, CredentialState, CredentialWriteError};
pub use settings_store::{SettingsChange, SettingsChanged, SettingsWriteError};
