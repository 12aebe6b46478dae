//! A product image as operators upload it: one of the raster formats every browser shows, whose
//! bytes must agree with the type it is declared as, named by the SHA-256 of its bytes.
//!
//! SVG is not among the formats, on purpose: an SVG is a document that can carry script, and
//! these images are served from the shop's own origin.

use bytes::Bytes;
use sha2::{Digest, Sha256};
use std::fmt;

/// An accepted image format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImageFormat {
    Png,
    Jpeg,
    Gif,
    Webp,
}

impl ImageFormat {
    /// The format a `Content-Type` declares (parameters and case ignored), if it is one of ours.
    pub fn from_content_type(declared: &str) -> Option<Self> {
        let media = declared.split(';').next().unwrap_or_default().trim();
        [Self::Png, Self::Jpeg, Self::Gif, Self::Webp]
            .into_iter()
            .find(|format| media.eq_ignore_ascii_case(format.content_type()))
    }

    /// The format the file's first bytes (its magic number) say it is.
    pub fn sniff(bytes: &[u8]) -> Option<Self> {
        match bytes {
            [0x89, b'P', b'N', b'G', b'\r', b'\n', 0x1a, b'\n', ..] => Some(Self::Png),
            [0xff, 0xd8, 0xff, ..] => Some(Self::Jpeg),
            [b'G', b'I', b'F', b'8', b'7' | b'9', b'a', ..] => Some(Self::Gif),
            [
                b'R',
                b'I',
                b'F',
                b'F',
                _,
                _,
                _,
                _,
                b'W',
                b'E',
                b'B',
                b'P',
                ..,
            ] => Some(Self::Webp),
            _ => None,
        }
    }

    /// The canonical `Content-Type`, stored with the image and served with it.
    pub fn content_type(self) -> &'static str {
        match self {
            Self::Png => "image/png",
            Self::Jpeg => "image/jpeg",
            Self::Gif => "image/gif",
            Self::Webp => "image/webp",
        }
    }
}

/// An image's name: the SHA-256 of its bytes, so the same bytes uploaded twice are one image
/// and a URL naming it never needs to change or expire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ImageId([u8; 32]);

impl ImageId {
    /// The id of these bytes.
    pub fn of(bytes: &[u8]) -> Self {
        Self(Sha256::digest(bytes).into())
    }

    /// An id as URLs spell it: exactly 64 lowercase hex digits, so each image has one URL.
    pub fn parse(text: &str) -> Option<Self> {
        let text = text.as_bytes();
        if text.len() != 64 {
            return None;
        }
        let mut id = [0u8; 32];
        for (byte, pair) in id.iter_mut().zip(text.chunks_exact(2)) {
            *byte = (hex_digit(pair[0])? << 4) | hex_digit(pair[1])?;
        }
        Some(Self(id))
    }
}

fn hex_digit(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    }
}

/// The 64 lowercase hex digits of [`ImageId::parse`].
impl fmt::Display for ImageId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.iter().try_for_each(|b| write!(f, "{b:02x}"))
    }
}

/// Why an upload is not an image we keep.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ImageError {
    #[error("the image is empty")]
    Empty,
    #[error("only PNG, JPEG, GIF and WebP images are accepted, declared by their content type")]
    Unsupported,
    #[error("the file is not the {} image its content type declares", .0.content_type())]
    Mismatch(ImageFormat),
}

/// An image whose bytes are what its format says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Image {
    pub id: ImageId,
    pub format: ImageFormat,
    /// Shared, not copied, between the cache and each answer that sends them.
    pub bytes: Bytes,
}

impl Image {
    /// Accepts `bytes` declared as `content_type` only when both name the same accepted format.
    pub fn parse(content_type: Option<&str>, bytes: Bytes) -> Result<Self, ImageError> {
        if bytes.is_empty() {
            return Err(ImageError::Empty);
        }
        let format = content_type
            .and_then(ImageFormat::from_content_type)
            .ok_or(ImageError::Unsupported)?;
        if ImageFormat::sniff(&bytes) != Some(format) {
            return Err(ImageError::Mismatch(format));
        }
        Ok(Self {
            id: ImageId::of(&bytes),
            format,
            bytes,
        })
    }

    /// Its size in bytes.
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    /// Never true of a parsed image; for the `len` convention.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PNG: &[u8] = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR";
    const JPEG: &[u8] = b"\xff\xd8\xff\xe0\0\x10JFIF";
    const GIF: &[u8] = b"GIF89a\x01\0\x01\0";
    const WEBP: &[u8] = b"RIFF\x24\0\0\0WEBPVP8 ";

    #[test]
    fn each_format_is_accepted_as_itself_and_refused_as_another() {
        let samples = [
            ("image/png", PNG),
            ("image/jpeg", JPEG),
            ("image/gif", GIF),
            ("image/webp", WEBP),
        ];
        for (declared, bytes) in samples {
            let image = Image::parse(Some(declared), Bytes::from_static(bytes)).unwrap();
            assert_eq!(image.format.content_type(), declared);
            assert_eq!(image.id, ImageId::of(bytes));
            for (other, _) in samples.iter().filter(|(other, _)| *other != declared) {
                let refused = Image::parse(Some(other), Bytes::from_static(bytes));
                assert!(matches!(refused, Err(ImageError::Mismatch(_))), "{other}");
            }
        }
        let old_gif = Bytes::from_static(b"GIF87a\x01\0");
        assert!(Image::parse(Some("IMAGE/GIF; x=y"), old_gif).is_ok());
    }

    #[test]
    fn empty_undeclared_script_capable_and_truncated_files_are_refused() {
        let png = || Bytes::from_static(PNG);
        assert_eq!(
            Image::parse(Some("image/png"), Bytes::new()),
            Err(ImageError::Empty)
        );
        for declared in [None, Some("image/svg+xml"), Some("text/html"), Some("")] {
            assert_eq!(
                Image::parse(declared, png()),
                Err(ImageError::Unsupported),
                "{declared:?}"
            );
        }
        let svg = Bytes::from_static(b"<svg xmlns='http://www.w3.org/2000/svg'><script/></svg>");
        assert!(Image::parse(Some("image/png"), svg).is_err());
        let html = Bytes::from_static(b"<!doctype html><script>alert(1)</script>");
        assert!(Image::parse(Some("image/jpeg"), html).is_err());
        let riff_not_webp = Bytes::from_static(b"RIFF\x24\0\0\0WAVEfmt ");
        assert!(Image::parse(Some("image/webp"), riff_not_webp).is_err());
        assert!(Image::parse(Some("image/png"), Bytes::from_static(&PNG[..7])).is_err());
    }

    #[test]
    fn ids_are_64_lowercase_hex_digits_and_read_back() {
        let id = ImageId::of(b"abc");
        let text = id.to_string();
        assert_eq!(
            text,
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(ImageId::parse(&text), Some(id));
        for bad in [
            "",
            &text[..63],
            &format!("{text}0"),
            &text.to_uppercase(),
            &format!("{}g", &text[..63]),
            "../../../../etc/passwd",
        ] {
            assert_eq!(ImageId::parse(bad), None, "{bad}");
        }
    }

    mod properties {
        use super::*;
        use proptest::prelude::*;

        const FORMATS: [ImageFormat; 4] = [
            ImageFormat::Png,
            ImageFormat::Jpeg,
            ImageFormat::Gif,
            ImageFormat::Webp,
        ];

        fn magic(format: ImageFormat) -> &'static [u8] {
            match format {
                ImageFormat::Png => PNG,
                ImageFormat::Jpeg => JPEG,
                ImageFormat::Gif => GIF,
                ImageFormat::Webp => WEBP,
            }
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(256))]

            /// Whatever bytes and type come in, an accepted image's bytes start with the
            /// magic of the format it was declared as, and it is named by their hash.
            #[test]
            fn an_accepted_image_is_what_it_was_declared_as(
                bytes in prop::collection::vec(any::<u8>(), 0..64),
                declared in prop::option::of("image/(png|jpeg|gif|webp|svg\\+xml)(; ?q=1)?|.{0,20}"),
                format in prop::sample::select(FORMATS.to_vec()),
                with_magic in any::<bool>(),
            ) {
                let bytes = if with_magic { [magic(format), &bytes[..]].concat() } else { bytes };
                match Image::parse(declared.as_deref(), Bytes::from(bytes.clone())) {
                    Ok(image) => {
                        prop_assert_eq!(declared.as_deref().and_then(ImageFormat::from_content_type), Some(image.format));
                        prop_assert_eq!(ImageFormat::sniff(&bytes), Some(image.format));
                        prop_assert_eq!(image.id, ImageId::of(&bytes));
                    }
                    Err(_) => prop_assert!(
                        bytes.is_empty()
                            || ImageFormat::sniff(&bytes).is_none()
                            || declared.as_deref().and_then(ImageFormat::from_content_type) != ImageFormat::sniff(&bytes)
                    ),
                }
                if with_magic {
                    prop_assert_eq!(ImageFormat::sniff(&bytes), Some(format));
                }
            }

            /// Every id reads back from its text, and only 64 lowercase hex digits are an id.
            #[test]
            fn ids_round_trip_and_only_lowercase_hex_parses(id in any::<[u8; 32]>(), text in "[0-9a-fA-Fg]{64}|.{0,70}") {
                prop_assert_eq!(ImageId::parse(&ImageId(id).to_string()), Some(ImageId(id)));
                let hex = text.len() == 64 && text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
                prop_assert_eq!(ImageId::parse(&text).map(|id| id.to_string()), hex.then(|| text.clone()));
            }
        }
    }
}
