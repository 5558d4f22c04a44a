//! A world for sandbox tests: a harness home with a credentials file, a workspace, an
//! "outside" folder no confined process may touch, and a private temp root. The temp root is
//! set explicitly (`policy_row`), so a checkout under `/tmp` does not put "outside" inside a
//! writable root of `workspace-write`.

use std::path::PathBuf;

/// The API key the sandbox tests hand dsh (it must never reach the model).
pub const API_KEY: &str = "sk-escape-suite-key-0123456789";
/// A secret stored in the harness home's credentials file.
pub const STORED_SECRET: &str = "sk-stored-credential-9876543210";

pub struct Confined {
    pub root: tempfile::TempDir,
    pub home: PathBuf,
    pub dsh_home: PathBuf,
    pub work: PathBuf,
    pub outside: PathBuf,
    /// The only writable temp root.
    pub tmp: PathBuf,
}

impl Confined {
    pub fn new() -> Self {
        let root = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
        let base = std::fs::canonicalize(root.path()).unwrap();
        let home = base.join("home");
        let dsh_home = home.join(".dsh");
        let work = base.join("ws");
        let outside = base.join("outside");
        let tmp = base.join("tmp");
        for d in [&dsh_home, &work.join(".git"), &outside, &tmp] {
            std::fs::create_dir_all(d).unwrap();
        }
        let creds = dsh_home.join(".credentials.yaml");
        std::fs::write(
            &creds,
            format!("version: 1\nrefs:\n  OTHER_SERVICE_TOKEN: {STORED_SECRET}\n"),
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&creds, std::fs::Permissions::from_mode(0o600)).unwrap();
        Self {
            root,
            home,
            dsh_home,
            work,
            outside,
            tmp,
        }
    }

    pub fn creds(&self) -> PathBuf {
        self.dsh_home.join(".credentials.yaml")
    }

    /// The sandbox-policy row with this world's temp root.
    pub fn policy_row(&self) -> String {
        format!(
            "- id: sandbox-policy\n  config:\n    mode: !!js process.env.DSH_PERMISSION_MODE ?? 'workspace-write'\n    tempRoots: ['{}']\n",
            self.tmp.display()
        )
    }
}
