//! Policy and host plugins composed around the core: retry on request errors, session
//! titles, permission mode and approval policy (with their runtime-context sections),
//! settings, credentials and the default model.

pub mod checkpoint;
pub mod instructions;
pub mod permissions;
pub mod presets;
pub mod repeat;
pub mod retry;
pub mod timeout;
pub mod title;

/// Settings, credentials and the default model live in `dsh-host` (below every capability);
/// their plugins are still registered here, with the other policy rows.
pub use dsh_host::config as host;
pub use dsh_host::{
    CredentialSource, CredentialState, CredentialWriteError, Credentials, DefaultModel, Settings,
    SettingsChange, SettingsChanged, SettingsWriteError, dsh_home, layer, parse_dotenv,
    read_yaml_file,
};
pub use permissions::{ApprovalAnswerer, ApprovalPolicy, Approvals};

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
