//! Variables a front end publishes to every model shell call (the `DSH_*` facts of the
//! surface the session runs under, e.g. `DSH_WEB_URL` from `dsh web`): a root service the
//! front end provides and the shell tools read at each call.

use std::collections::BTreeMap;
use std::sync::RwLock;

/// Name → value, set by the front end, read by shell tools.
#[derive(Debug, Default)]
pub struct HostShellVars {
    vars: RwLock<BTreeMap<String, String>>,
}

impl HostShellVars {
    pub fn set(&self, name: &str, value: &str) {
        self.vars
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(name.to_string(), value.to_string());
    }

    /// Every variable, sorted by name.
    pub fn snapshot(&self) -> Vec<(String, String)> {
        self.vars
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }
}
