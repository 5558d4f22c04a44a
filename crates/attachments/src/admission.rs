//! Prompt image admission shared by every front door that takes inline images (ACP's
//! `image` blocks, the web's `session.prompt` image parts): strict decoding of one wire
//! image, the route capability gate, and storage of the whole batch before the caller
//! queues any message. A failure leaves nothing referenced: the caller gets no partial
//! list and must not queue the prompt.

use dsh_kernel::Context;
use dsh_llm::{IMAGE_MEDIA_TYPES, ImageAttachmentRef, LlmRuntime};

use crate::error::AttachmentErrorCode;
use crate::store::{AttachmentStore, SaveImage};
use crate::wire::decode_canonical_base64;

/// Why a prompt's images were not admitted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AdmissionError {
    /// The caller can fix it: bad data, a limit, a route without image input, no store.
    /// `reason` is a stable upper-case code (the attachment codes, plus
    /// `MODEL_DOES_NOT_SUPPORT_IMAGES`, `MODEL_ROUTE_UNRESOLVED`, `ATTACHMENTS_UNAVAILABLE`).
    Refused {
        reason: &'static str,
        message: String,
    },
    /// The host failed (route lookup, storage I/O); the message names no path or bytes.
    Failed { message: String },
}

impl AdmissionError {
    pub fn message(&self) -> &str {
        match self {
            Self::Refused { message, .. } | Self::Failed { message } => message,
        }
    }
}

/// Decodes one wire image: the declared type must be a raster type we take and the data
/// canonical base64. The bytes themselves are checked when the batch is stored.
pub fn decode_prompt_image(
    media_type: &str,
    data: &str,
    name: Option<&str>,
) -> Result<SaveImage, AdmissionError> {
    if !IMAGE_MEDIA_TYPES.contains(&media_type) {
        return Err(AdmissionError::Refused {
            reason: AttachmentErrorCode::UnsupportedImageType.as_str(),
            message: "image mimeType is not supported; send image/png, image/jpeg, image/webp or image/gif"
                .into(),
        });
    }
    let data = decode_canonical_base64(data).map_err(|e| AdmissionError::Refused {
        reason: e.code.as_str(),
        message: "image data must be canonical base64".into(),
    })?;
    Ok(SaveImage {
        data,
        media_type: media_type.to_string(),
        name: name.map(str::to_owned),
    })
}

/// Whether `provider`/`model` declares image input (an unknown route answers why not).
pub fn check_image_route(
    root: &Context,
    provider: &str,
    model: &str,
) -> Result<(), AdmissionError> {
    let Some(llm) = root.get::<LlmRuntime>() else {
        return Err(AdmissionError::Refused {
            reason: "MODEL_ROUTE_UNRESOLVED",
            message: "the current model route could not be resolved for image input".into(),
        });
    };
    let info = llm
        .model_info(provider, model)
        .map_err(|_| AdmissionError::Failed {
            message: "the current model route could not be verified for image input".into(),
        })?;
    if !info.input_modalities.iter().any(|m| m == "image") {
        return Err(AdmissionError::Refused {
            reason: "MODEL_DOES_NOT_SUPPORT_IMAGES",
            message: format!("model \"{model}\" does not declare image input"),
        });
    }
    Ok(())
}

/// Admits a prompt's images for the route `provider`/`model`: checks a store is mounted
/// and the route declares image input, then stores the whole batch (every image validated
/// before any is written). References come back in input order. Blocking: call it off the
/// async runtime.
pub fn admit_prompt_images(
    root: &Context,
    provider: &str,
    model: &str,
    images: &[SaveImage],
) -> Result<Vec<ImageAttachmentRef>, AdmissionError> {
    let store = mounted_store(root)?;
    check_image_route(root, provider, model)?;
    save_batch(&store, images)
}

/// Stores a prompt's images whatever the route: a text-only model is then shown a
/// placeholder for each (the runtime's projection) while the log keeps the image, as
/// upstream 0.2's SDK runtime does. Blocking, like [`admit_prompt_images`].
pub fn store_prompt_images(
    root: &Context,
    images: &[SaveImage],
) -> Result<Vec<ImageAttachmentRef>, AdmissionError> {
    save_batch(&*mounted_store(root)?, images)
}

fn mounted_store(root: &Context) -> Result<std::sync::Arc<AttachmentStore>, AdmissionError> {
    root.get::<AttachmentStore>()
        .ok_or_else(|| AdmissionError::Refused {
            reason: "ATTACHMENTS_UNAVAILABLE",
            message: "no attachment store is mounted".into(),
        })
}

fn save_batch(
    store: &AttachmentStore,
    images: &[SaveImage],
) -> Result<Vec<ImageAttachmentRef>, AdmissionError> {
    store.save_images(images).map_err(|e| {
        if e.code.is_admission() {
            AdmissionError::Refused {
                reason: e.code.as_str(),
                message: e.message,
            }
        } else {
            AdmissionError::Failed {
                message: "unable to persist the prompt image batch".into(),
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_images_are_decoded_strictly() {
        let ok = decode_prompt_image("image/png", "aGk=", Some("a.png")).unwrap();
        assert_eq!(ok.data, b"hi");
        assert_eq!(ok.name.as_deref(), Some("a.png"));
        assert!(matches!(
            decode_prompt_image("image/tiff", "aGk=", None),
            Err(AdmissionError::Refused {
                reason: "UNSUPPORTED_IMAGE_TYPE",
                ..
            })
        ));
        assert!(matches!(
            decode_prompt_image("image/png", "aGk", None),
            Err(AdmissionError::Refused {
                reason: "INVALID_IMAGE_BASE64",
                ..
            })
        ));
    }

    #[test]
    fn without_a_store_nothing_is_admitted() {
        let root = Context::new_root();
        let img = decode_prompt_image("image/png", "aGk=", None).unwrap();
        let err = admit_prompt_images(&root, "p", "m", &[img]).unwrap_err();
        assert!(matches!(
            err,
            AdmissionError::Refused {
                reason: "ATTACHMENTS_UNAVAILABLE",
                ..
            }
        ));
    }
}
