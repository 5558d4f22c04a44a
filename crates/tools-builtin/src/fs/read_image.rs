//! `read_image`: commits a PNG/JPEG/WebP/GIF file to the attachment store and returns the
//! image itself beside a short text envelope. Exists only while a store is mounted; refuses
//! before any filesystem work when the calling route does not declare image input.

use std::io::Read;
use std::sync::Arc;

use dsh_attachments::{AttachmentErrorCode, AttachmentStore, SaveImage, media_type_for_path};
use dsh_kernel::{BoxError, Context};
use dsh_llm::{ContentBlock, ImageAttachmentRef, LlmRuntime};
use dsh_tools::{Reply, ToolOutput, ToolRunContext, TypedTool};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use super::FsBackend;
use super::events::{Observation, observed};
use super::io::{Kind, blocking, io_error, probe};
use crate::errors;
use crate::paths::{fs_base, resolve_target};

/// The `read_image` tool.
pub struct ReadImageTool {
    backend: Arc<FsBackend>,
    store: Arc<AttachmentStore>,
    /// The registering context, for the `llm` service.
    ctx: Context,
}

impl ReadImageTool {
    pub fn new(ctx: &Context, backend: Arc<FsBackend>, store: Arc<AttachmentStore>) -> Self {
        Self {
            backend,
            store,
            ctx: ctx.clone(),
        }
    }
}

// The arguments (no doc: upstream's parameter object carries no description).
#[derive(Deserialize, JsonSchema)]
pub struct ReadImageArgs {
    /// Path to the image file, resolved by the filesystem backend.
    file_path: String,
}

/// The model-facing envelope beside the image block.
pub(crate) fn format_image_read(display: &str, image: &ImageAttachmentRef) -> String {
    let scaled = match image.original_dimensions {
        Some((ow, oh)) if image.width > 0 && image.height > 0 => {
            let x = format!("{:.2}", ow as f64 / image.width as f64);
            let y = format!("{:.2}", oh as f64 / image.height as f64);
            let advice = if x == y {
                format!("scale both coordinates by {x}")
            } else {
                format!("scale x by {x} and y by {y}")
            };
            format!(
                " (downscaled from {ow}x{oh} px; {advice} to find a point in the original file)"
            )
        }
        _ => String::new(),
    };
    format!(
        "<path>{display}</path>\n<type>image</type>\n<content>\n{} image, {}x{} px, {} bytes{scaled}\n</content>",
        image.media_type, image.width, image.height, image.bytes
    )
}

/// Refuses unless the calling route's model declares image input.
fn assert_image_route(
    ctx: &Context,
    run: &ToolRunContext,
    requested: &str,
) -> Result<(), BoxError> {
    let route = run
        .session
        .as_ref()
        .and_then(|s| s.read(|s| s.request_header().map(|h| h.config.clone())));
    let llm = ctx
        .get::<LlmRuntime>()
        .or_else(|| run.ctx.get::<LlmRuntime>());
    let (Some(route), Some(llm)) = (route, llm) else {
        return Err(errors::plain(format!(
            "cannot read \"{requested}\" as an image: the current model route could not be resolved"
        )));
    };
    let accepts = llm
        .model_info(&route.provider, &route.model)
        .is_ok_and(|info| info.input_modalities.iter().any(|m| m == "image"));
    if !accepts {
        return Err(errors::plain(format!(
            "cannot read \"{requested}\" as an image: model \"{}\" does not declare image input; switch to an image-capable model to read images",
            route.model
        )));
    }
    Ok(())
}

/// Reads at most `cap` bytes; a longer file is an error (memory stays bounded).
fn read_capped(target: &crate::paths::Target, cap: u64) -> Result<Option<Vec<u8>>, BoxError> {
    let file = super::io::open_checked(target)?;
    let mut data = Vec::new();
    file.take(cap + 1)
        .read_to_end(&mut data)
        .map_err(|e| io_error(&e, "read", &target.key))?;
    Ok((data.len() as u64 <= cap).then_some(data))
}

impl ReadImageTool {
    async fn read(&self, args: ReadImageArgs, run: ToolRunContext) -> Result<ToolOutput, BoxError> {
        let file_path = args.file_path;
        if file_path.trim().is_empty() {
            return Err(errors::plain("file_path must be a non-empty string"));
        }
        // Checks that need no file access come first.
        let Some(media_type) = media_type_for_path(&file_path) else {
            return Err(errors::plain(format!(
                "cannot read \"{file_path}\": read_image only accepts PNG/JPEG/WebP/GIF paths"
            )));
        };
        let limits = self.store.limits();
        if !limits.media_types.contains(&media_type) {
            return Err(errors::plain(format!(
                "cannot read \"{file_path}\": {media_type} images are not accepted by this deployment"
            )));
        }
        assert_image_route(&self.ctx, &run, &file_path)?;

        let base = fs_base(&run, &file_path, &self.backend.cwd);
        let target = resolve_target(&base, &file_path)?;
        let display = target.display.clone();
        let info = {
            let key = target.key.clone();
            blocking(move || probe(&key)).await?
        };
        let Some(info) = info else {
            observed(&run.ctx, &target, Observation::Absent, run.session.as_ref());
            return Err(errors::fs(
                "FS_NOT_FOUND",
                format!("cannot read \"{display}\": not found"),
            ));
        };
        if info.kind != Kind::File {
            return Err(errors::fs(
                "FS_NOT_REGULAR_FILE",
                format!("cannot read \"{display}\": not a regular file"),
            ));
        }
        let cap = limits.read_cap();
        let data = {
            let target = target.clone();
            blocking(move || read_capped(&target, cap)).await?
        };
        let Some(data) = data else {
            return Err(errors::plain(format!(
                "cannot read \"{display}\": the file is larger than this setup stores for an image; make a smaller copy (fewer pixels or stronger compression) and read that instead"
            )));
        };
        if run.cancel.is_cancelled() {
            return Err(errors::fs("FS_ABORTED", "read aborted"));
        }
        let name = std::path::Path::new(&display)
            .file_name()
            .map(|n| n.to_string_lossy().into_owned());
        let store = self.store.clone();
        let input = SaveImage {
            data,
            media_type: media_type.to_string(),
            name,
        };
        let saved = blocking(move || Ok(store.save_image(&input))).await?;
        let image = saved.map_err(|e| refusal(&display, media_type, &self.store, e))?;
        observed(
            &run.ctx,
            &target,
            Observation::Present {
                version: info.version,
            },
            run.session.as_ref(),
        );
        // A Code Mode program receives `{path, image}`.
        run.set_value(serde_json::json!({"path": display, "image": image.to_tool_value()}));
        Ok(ToolOutput {
            content: vec![
                ContentBlock::text(format_image_read(&display, &image)),
                ContentBlock::image(image.to_tool_value()),
            ],
            meta: None,
        })
    }
}

/// The model-facing text of a store refusal, per error code.
fn refusal(
    display: &str,
    media_type: &str,
    store: &AttachmentStore,
    e: dsh_attachments::AttachmentError,
) -> BoxError {
    let l = store.limits();
    let text = match e.code {
        AttachmentErrorCode::ImageDimensionTooLarge => format!(
            "cannot read \"{display}\": the image is wider or taller than {} px; make a scaled-down copy and read that instead",
            l.max_image_dimension
        ),
        AttachmentErrorCode::ImageTooManyPixels => format!(
            "cannot read \"{display}\": the image has more than {} pixels; make a scaled-down copy and read that instead",
            l.max_image_pixels
        ),
        AttachmentErrorCode::ImageTooLarge => format!(
            "cannot read \"{display}\": the file is larger than this setup stores for an image; make a smaller copy (fewer pixels or stronger compression) and read that instead"
        ),
        AttachmentErrorCode::ImageTypeMismatch => {
            let ext = display
                .rsplit_once('.')
                .map(|(_, e)| format!(".{}", e.to_ascii_lowercase()))
                .unwrap_or_default();
            format!(
                "cannot read \"{display}\": its {ext} name says {media_type}, but the content is another image format; if the content is PNG, JPEG, WebP or GIF, rename the file to the matching extension, otherwise convert it to one of those"
            )
        }
        AttachmentErrorCode::InvalidImage => {
            format!("cannot read \"{display}\": {}", e.message)
        }
        _ => e.message,
    };
    errors::plain(text)
}

impl TypedTool for ReadImageTool {
    type Args = ReadImageArgs;
    /// `{path, image}`, reported by the body itself (the image's tool value).
    type Value = ();

    fn name(&self) -> String {
        "read_image".into()
    }

    fn description(&self) -> String {
        "Look at an image file (PNG, JPEG, WebP or GIF): the image itself comes back to you. Oversized images are checked and scaled down automatically (the result then says how to map coordinates back to the original), so there is no need to install image tools or make thumbnails first. Several images can be read in parallel. Works only when the current model accepts image input.".into()
    }

    fn value_schema(&self) -> Result<Option<Value>, String> {
        Ok(Some(crate::outputs::read_image().clone()))
    }

    fn concurrency_safe(&self) -> bool {
        true
    }

    async fn run(
        self: Arc<Self>,
        args: ReadImageArgs,
        ctx: ToolRunContext,
    ) -> Result<Reply<()>, BoxError> {
        Ok(Reply::output(self.read(args, ctx).await?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn the_envelope_names_type_size_and_downscaling() {
        let mut image = ImageAttachmentRef {
            attachment_id: "sha256:x".into(),
            media_type: "image/png".into(),
            bytes: 69,
            width: 1,
            height: 1,
            name: None,
            original_dimensions: None,
        };
        assert_eq!(
            format_image_read("/w/red.png", &image),
            "<path>/w/red.png</path>\n<type>image</type>\n<content>\nimage/png image, 1x1 px, 69 bytes\n</content>"
        );
        image.width = 1000;
        image.height = 500;
        image.original_dimensions = Some((3000, 1500));
        assert!(format_image_read("a", &image).contains(
            " (downscaled from 3000x1500 px; scale both coordinates by 3.00 to find a point in the original file)"
        ));
    }
}
