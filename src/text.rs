//! Shared immutable text: the strings a plan repeats for every node.
//!
//! Stage: plan (used by render and plan types). A 32,768-node plan holds about two
//! million entries whose target, kind, name, reason and fingerprints are, across
//! nodes, a few thousand distinct strings. [`Text`] is one reference-counted copy of
//! such a string (a clone is a counter increment, not an allocation) and [`Interner`]
//! hands out the copy already made for equal text. Serialized as a plain string, so
//! plan JSON does not change.

use std::borrow::Borrow;
use std::collections::HashSet;
use std::fmt;
use std::ops::Deref;

use arcstr::ArcStr;
use foldhash::fast::RandomState;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// An immutable string whose clones share one allocation.
///
/// One pointer wide and one allocation per distinct string ([`ArcStr`] keeps the
/// count and the length in front of the bytes): a large plan holds millions of these
/// in its entries, resources and dependency lists, and its ids (one distinct string
/// per resource, ~230,000 at 4,096 nodes) were two allocations each as `Arc<Box<str>>`.
/// The empty string allocates nothing.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Text(ArcStr);

impl Text {
    /// The text as `&str`.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether `other` is this very copy (a clone of it), not only equal text.
    #[must_use]
    pub fn shares(&self, other: &Self) -> bool {
        ArcStr::ptr_eq(&self.0, &other.0)
    }
}

impl Default for Text {
    fn default() -> Self {
        Self(ArcStr::new())
    }
}

impl Deref for Text {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

impl AsRef<str> for Text {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl Borrow<str> for Text {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl From<&str> for Text {
    fn from(text: &str) -> Self {
        Self(ArcStr::from(text))
    }
}

impl From<String> for Text {
    fn from(text: String) -> Self {
        // Copied into the shared allocation (count, length, bytes); the String is freed.
        Self(ArcStr::from(text.as_str()))
    }
}

impl From<&String> for Text {
    fn from(text: &String) -> Self {
        Self::from(text.as_str())
    }
}

impl From<Text> for String {
    fn from(text: Text) -> Self {
        text.as_str().to_owned()
    }
}

impl PartialEq<str> for Text {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for Text {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl PartialEq<String> for Text {
    fn eq(&self, other: &String) -> bool {
        self.as_str() == other.as_str()
    }
}

impl PartialEq<Text> for &str {
    fn eq(&self, other: &Text) -> bool {
        *self == other.as_str()
    }
}

impl PartialEq<Text> for String {
    fn eq(&self, other: &Text) -> bool {
        self.as_str() == other.as_str()
    }
}

impl fmt::Debug for Text {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), formatter)
    }
}

impl fmt::Display for Text {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        // `pad`, so width and alignment in format strings apply as they do to `str`.
        formatter.pad(self.as_str())
    }
}

impl Serialize for Text {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Text {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        String::deserialize(deserializer).map(Self::from)
    }
}

/// Hands out one shared [`Text`] per distinct string.
#[derive(Debug, Default)]
pub struct Interner {
    seen: HashSet<Text, RandomState>,
}

impl Interner {
    /// The shared copy of `text`, made on first use.
    pub fn get(&mut self, text: &str) -> Text {
        if let Some(shared) = self.seen.get(text) {
            return shared.clone();
        }
        let shared = Text::from(text);
        self.seen.insert(shared.clone());
        shared
    }

    /// The shared copy of `text`, which is kept (not copied) when it is the first.
    pub fn take(&mut self, text: String) -> Text {
        if let Some(shared) = self.seen.get(text.as_str()) {
            return shared.clone();
        }
        let shared = Text::from(text);
        self.seen.insert(shared.clone());
        shared
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interned_copies_share_one_allocation() {
        let mut interner = Interner::default();
        let first = interner.get("sha256:ab mode:644");
        let second = interner.take("sha256:ab mode:644".to_owned());
        assert!(first.shares(&second));
        assert_ne!(interner.get("other"), first);
    }

    #[test]
    fn is_one_pointer_wide() {
        assert_eq!(std::mem::size_of::<Text>(), std::mem::size_of::<usize>());
        assert_eq!(std::mem::size_of::<Option<Text>>(), std::mem::size_of::<usize>());
    }

    #[test]
    fn serializes_as_a_plain_string() {
        let text = Text::from("node01:file:/etc/hosts");
        let json = serde_json::to_string(&text).expect("serializes");
        assert_eq!(json, "\"node01:file:/etc/hosts\"");
        assert_eq!(serde_json::from_str::<Text>(&json).expect("parses"), text);
        assert_eq!(format!("[{text:>24}]"), "[  node01:file:/etc/hosts]");
    }
}
