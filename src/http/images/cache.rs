//! The images this process served or took last, kept in memory up to a total size: a sale
//! page's crowd asks for the same few images, and each ask should not read the database.

use crate::domain::{Image, ImageId};
use std::collections::{BTreeMap, HashMap};

/// Images by id, the least recently used given up first once their sizes add up past the
/// capacity.
pub(super) struct ImageCache {
    /// Most bytes of images kept at once.
    capacity: usize,
    /// Bytes of the images kept now.
    used: usize,
    /// Counts uses: the higher an entry's number, the more recently it was used.
    uses: u64,
    /// Each image with the number of its last use.
    entries: HashMap<ImageId, (Image, u64)>,
    /// The ids by the number of their last use: the first is the next to give up.
    by_use: BTreeMap<u64, ImageId>,
}

impl ImageCache {
    /// An empty cache for at most `capacity` bytes of images.
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity,
            used: 0,
            uses: 0,
            entries: HashMap::new(),
            by_use: BTreeMap::new(),
        }
    }

    /// The image, if kept, marked as just used.
    pub fn get(&mut self, id: ImageId) -> Option<Image> {
        let (image, last_use) = self.entries.get_mut(&id)?;
        self.uses += 1;
        self.by_use.remove(last_use);
        self.by_use.insert(self.uses, id);
        *last_use = self.uses;
        Some(image.clone())
    }

    /// Keeps `image`, giving up the least recently used ones until it fits. One larger than
    /// the whole cache is not kept.
    pub fn insert(&mut self, image: Image) {
        if image.len() > self.capacity || self.get(image.id).is_some() {
            return;
        }
        while self.used + image.len() > self.capacity {
            let Some((_, oldest)) = self.by_use.pop_first() else {
                break;
            };
            if let Some((gone, _)) = self.entries.remove(&oldest) {
                self.used -= gone.len();
            }
        }
        self.uses += 1;
        self.used += image.len();
        self.by_use.insert(self.uses, image.id);
        self.entries.insert(image.id, (image, self.uses));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::ImageFormat;

    /// A distinct image of `len` bytes.
    fn image(seed: u8, len: usize) -> Image {
        let bytes = vec![seed; len];
        Image {
            id: ImageId::of(&bytes),
            format: ImageFormat::Png,
            bytes: bytes.into(),
        }
    }

    #[test]
    fn the_least_recently_used_images_go_first_once_the_bytes_run_out() {
        let mut cache = ImageCache::new(100);
        let (a, b, c) = (image(1, 40), image(2, 40), image(3, 40));
        cache.insert(a.clone());
        cache.insert(b.clone());
        assert_eq!(cache.get(a.id), Some(a.clone()), "a is now the most recent");
        cache.insert(c.clone());
        assert_eq!(cache.get(b.id), None, "b was the least recently used");
        assert_eq!(cache.get(a.id), Some(a));
        assert_eq!(cache.get(c.id), Some(c));
        assert_eq!(cache.used, 80);
    }

    #[test]
    fn a_large_image_makes_room_for_itself_and_one_over_the_capacity_is_not_kept() {
        let mut cache = ImageCache::new(100);
        for seed in 0..10 {
            cache.insert(image(seed, 10));
        }
        assert_eq!(cache.used, 100);
        let large = image(20, 95);
        cache.insert(large.clone());
        assert_eq!(cache.used, 95);
        assert_eq!(cache.get(large.id), Some(large));
        let too_large = image(21, 101);
        cache.insert(too_large.clone());
        assert_eq!(cache.get(too_large.id), None);
        assert_eq!(cache.used, 95);
    }

    #[test]
    fn the_same_image_twice_is_kept_and_counted_once() {
        let mut cache = ImageCache::new(100);
        let a = image(1, 30);
        cache.insert(a.clone());
        cache.insert(a.clone());
        assert_eq!(cache.used, 30);
        assert_eq!(cache.entries.len(), cache.by_use.len());
    }
}
