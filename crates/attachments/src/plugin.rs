//! `@deepseek-ai/dsh-attachment-local`: mounts the local store under `$DSH_HOME`.

use std::path::PathBuf;
use std::sync::Arc;

use dsh_kernel::{BoxError, Context, EmitEvent, Event, Plugin, PluginConfig};
use serde::Deserialize;

use crate::limits::ImageLimits;
use crate::store::AttachmentStore;

/// `attachments/mounted` (emit): a store was just provided. Tools that exist only while a
/// store is mounted (`read_image`) register from here when their own row applied first.
/// Listeners run synchronously during the row's application; a failing listener is logged
/// and does not unmount the store (fails open).
pub struct AttachmentsMounted;

impl Event for AttachmentsMounted {
    const NAME: &'static str = "attachments/mounted";
    type Payload = Arc<AttachmentStore>;
}

impl EmitEvent for AttachmentsMounted {}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct Config {
    dsh_home: Option<String>,
    #[serde(flatten)]
    limits: serde_json::Map<String, serde_json::Value>,
    #[serde(default)]
    image_compression_concurrency: Option<u64>,
}

/// `@deepseek-ai/dsh-attachment-local` (config: `dshHome?` and the [`ImageLimits`] keys).
pub struct AttachmentLocalPlugin;

impl Plugin for AttachmentLocalPlugin {
    fn name(&self) -> &'static str {
        "@deepseek-ai/dsh-attachment-local"
    }

    fn upstream_keys_not_taken(&self) -> &'static [(&'static str, &'static str)] {
        &[(
            "normalizedImageMaxPixels",
            "images are normalized by normalizedImageMaxDimension and normalizedImageMaxBytes here",
        )]
    }

    fn apply(&self, ctx: &Context, config: &PluginConfig) -> Result<(), BoxError> {
        config.raw_keys(&[
            "dshHome",
            "imageCompressionConcurrency",
            "maxImageBytes",
            "maxImagesPerMessage",
            "maxMessageImageBytes",
            "maxImagePixels",
            "maxImageDimension",
            "normalizedImageMaxDimension",
            "normalizedImageMaxBytes",
        ]);
        let c: Config = config.parse()?;
        if let Some(n) = c.image_compression_concurrency
            && !(1..=8).contains(&n)
        {
            return Err("attachment-local: imageCompressionConcurrency must be 1 to 8".into());
        }
        let limits: ImageLimits = serde_json::from_value(serde_json::Value::Object(c.limits))
            .map_err(|e| format!("{}: row \"{}\": {e}", config.source, config.row_id))?;
        limits
            .validate()
            .map_err(|e| format!("attachment-local: {e}"))?;
        let home = c
            .dsh_home
            .map(PathBuf::from)
            .unwrap_or_else(dsh_host::dsh_home);
        let store = Arc::new(AttachmentStore::with_compression_concurrency(
            home.join("attachments").join("v1"),
            limits,
            c.image_compression_concurrency
                .map_or(crate::DEFAULT_IMAGE_COMPRESSION_CONCURRENCY, |n| n as usize),
        ));
        ctx.provide(store.clone())?;
        let reader = store.clone();
        ctx.provide(Arc::new(dsh_llm::RequestImageReader(Box::new(
            move |image| {
                reader
                    .read_image(image)
                    .map(|data| crate::wire::encode_base64(&data))
                    .map_err(|e| dsh_llm::LlmError::new(e.code.as_str(), e.message))
            },
        ))))?;
        ctx.emit::<AttachmentsMounted>(&store);
        Ok(())
    }
}

/// Adds the attachment plugins to `catalog`.
pub fn register_catalog(catalog: &mut dsh_kernel::Catalog) {
    catalog.register(AttachmentLocalPlugin);
}
