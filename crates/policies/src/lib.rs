//! Policy and host plugins composed around the core: retry on request errors, session
//! titles, permission mode and approval policy (with their runtime-context sections),
//! settings, credentials and the default model.

pub mod checkpoint;
mod credentials_doc;
mod credentials_store;
pub mod host;
pub mod instructions;
pub mod permissions;
pub mod presets;
pub mod repeat;
pub mod retry;
mod settings_store;
pub mod timeout;
pub mod title;

pub use credentials_store::{CredentialSource, CredentialState, CredentialWriteError};
pub use host::{
    Credentials, DefaultModel, Settings, dsh_home, layer, parse_dotenv, read_yaml_file,
};
pub use permissions::{ApprovalAnswerer, ApprovalPolicy, Approvals};
pub use settings_store::{SettingsChange, SettingsChanged, SettingsWriteError};

/// Adds every plugin of this crate to `catalog`.
pub fn register_catalog(catalog: &mut dsh_kernel::Catalog) {
    catalog
        .register(checkpoint::CheckpointPolicyPlugin)
        .register(retry::RetryPlugin)
        .register(repeat::RepeatToolReminderPlugin)
        .register(title::TitlePlugin)
        .register(title::LlmTitlePlugin)
        .register(permissions::ApprovalPlugin)
        .register(presets::PermissionPresetsPlugin)
        .register(host::SettingsPlugin)
        .register(host::CredentialsPlugin)
        .register(host::DefaultModelPlugin)
        .register(instructions::InstructionsPlugin)
        .register(timeout::ToolCallTimeoutPolicyPlugin);
}
