//! A label set packed in two allocations: every name and value one after another in one string,
//! and where each ends. Prometheus writes a set as a JSON object sorted by name; read as a map of
//! strings it costs two allocations per label (and a B-tree map a node of eleven slots per set),
//! and the answers of 100 backends hold millions of labels, every one allocated, copied, merged
//! and freed.

use std::cmp::Ordering;
use std::fmt;
use std::hash::{Hash, Hasher};

use serde::de::{DeserializeSeed, MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Sorted by name, names unique.
#[derive(Clone, Default)]
pub struct Labels {
    /// Name, value, name, value, ... without separators.
    text: String,
    /// Where each name and value ends in `text`: name i at `ends[2 * i]`, its value at
    /// `ends[2 * i + 1]`.
    ends: Vec<u32>,
}

impl Labels {
    pub fn new() -> Self {
        Self::default()
    }

    /// Where pair `i` starts.
    #[inline]
    fn start(&self, i: usize) -> usize {
        match i {
            0 => 0,
            _ => self.ends[2 * i - 1] as usize,
        }
    }

    /// Pair `i` (names and values are whole strings of the text, so on char boundaries).
    #[inline]
    fn pair(&self, i: usize) -> (&str, &str) {
        let (start, middle, end) = (
            self.start(i),
            self.ends[2 * i] as usize,
            self.ends[2 * i + 1] as usize,
        );
        (&self.text[start..middle], &self.text[middle..end])
    }

    /// The name of pair `i`, as bytes (which order as the strings do, without the checks of
    /// slicing a string).
    #[inline]
    fn name(&self, i: usize) -> &[u8] {
        &self.text.as_bytes()[self.start(i)..self.ends[2 * i] as usize]
    }

    /// The value of pair `i`, as bytes.
    #[inline]
    fn value(&self, i: usize) -> &[u8] {
        &self.text.as_bytes()[self.ends[2 * i] as usize..self.ends[2 * i + 1] as usize]
    }

    fn position(&self, name: &str) -> Result<usize, usize> {
        let wanted = name.as_bytes();
        let (mut low, mut high) = (0, self.len());
        while low < high {
            let middle = low + (high - low) / 2;
            let here = self.name(middle);
            // Names mostly differ in their first byte: compared inline, before a whole
            // comparison.
            let order = match (here.first(), wanted.first()) {
                (Some(a), Some(b)) if a != b => a.cmp(b),
                _ => here.cmp(wanted),
            };
            match order {
                Ordering::Less => low = middle + 1,
                Ordering::Greater => high = middle,
                Ordering::Equal => return Ok(middle),
            }
        }
        Err(low)
    }

    pub fn get(&self, name: &str) -> Option<&str> {
        self.position(name).ok().map(|i| self.pair(i).1)
    }

    pub fn contains_key(&self, name: &str) -> bool {
        self.position(name).is_ok()
    }

    /// Sets `name` to `value`; returns the value it replaced.
    pub fn insert(&mut self, name: &str, value: &str) -> Option<String> {
        match self.position(name) {
            Ok(i) => {
                let (start, end) = (self.ends[2 * i] as usize, self.ends[2 * i + 1] as usize);
                let old = self.text[start..end].to_string();
                self.text.replace_range(start..end, value);
                let shift = |end: u32| end - old.len() as u32 + value.len() as u32;
                for end in &mut self.ends[2 * i + 1..] {
                    *end = shift(*end);
                }
                Some(old)
            }
            Err(i) => {
                // Written anew at the new size, in one pass: inserting into the text and the
                // ends in place would grow each (a copy) and then shift their tails (another).
                let at = self.start(i);
                let mut text = String::with_capacity(self.text.len() + name.len() + value.len());
                text.push_str(&self.text[..at]);
                text.push_str(name);
                text.push_str(value);
                text.push_str(&self.text[at..]);
                let added = (name.len() + value.len()) as u32;
                let name_end = (at + name.len()) as u32;
                let mut ends = Vec::with_capacity(self.ends.len() + 2);
                ends.extend_from_slice(&self.ends[..2 * i]);
                ends.extend([name_end, name_end + value.len() as u32]);
                ends.extend(self.ends[2 * i..].iter().map(|end| end + added));
                *self = Labels { text, ends };
                None
            }
        }
    }

    /// Sets `name` to `value`: [`Labels::insert`] without handing back the old value, and
    /// nothing to write when `name` has that value already (an alert of a Thanos sidecar
    /// carries its shard).
    pub fn set(&mut self, name: &str, value: &str) {
        if self.get(name) != Some(value) {
            self.insert(name, value);
        }
    }

    /// Removes every label named in `names`, in place: a lookup each, and the text after a
    /// label found moved up over it.
    pub fn remove_all(&mut self, names: &[impl AsRef<str>]) {
        for name in names {
            if let Ok(i) = self.position(name.as_ref()) {
                let (start, end) = (self.start(i), self.ends[2 * i + 1] as usize);
                self.text.replace_range(start..end, "");
                self.ends.drain(2 * i..2 * i + 2);
                let removed = (end - start) as u32;
                for end in &mut self.ends[2 * i..] {
                    *end -= removed;
                }
            }
        }
    }

    pub fn retain(&mut self, mut keep: impl FnMut(&str, &str) -> bool) {
        // Most sets keep every label: nothing to rewrite then.
        let Some(first) = (0..self.len()).find(|&i| {
            let (name, value) = self.pair(i);
            !keep(name, value)
        }) else {
            return;
        };
        let mut kept = Labels {
            text: String::with_capacity(self.text.len()),
            ends: Vec::with_capacity(self.ends.len()),
        };
        for i in 0..self.len() {
            let (name, value) = self.pair(i);
            if i < first || (i > first && keep(name, value)) {
                kept.push(name, value);
            }
        }
        *self = kept;
    }

    /// The set of `pairs`, read in order: the last of a repeated name wins, as in a JSON object
    /// read into a map. Pairs sorted by name already (as Prometheus and Thanos send them) are
    /// copied once, into a set allocated at its size.
    pub fn from_pairs(pairs: &[(&str, &str)]) -> Labels {
        if !pairs.windows(2).all(|pair| pair[0].0 < pair[1].0) {
            return pairs.iter().copied().collect();
        }
        let size = pairs
            .iter()
            .map(|(name, value)| name.len() + value.len())
            .sum();
        let mut labels = Labels {
            text: String::with_capacity(size),
            ends: Vec::with_capacity(2 * pairs.len()),
        };
        for (name, value) in pairs {
            labels.push(name, value);
        }
        labels
    }

    /// Appends a pair that sorts after every other.
    fn push(&mut self, name: &str, value: &str) {
        self.text.push_str(name);
        self.ends.push(self.text.len() as u32);
        self.text.push_str(value);
        self.ends.push(self.text.len() as u32);
    }

    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    pub fn len(&self) -> usize {
        self.ends.len() / 2
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        let mut start = 0;
        self.ends.chunks_exact(2).map(move |ends| {
            let (middle, end) = (ends[0] as usize, ends[1] as usize);
            let pair = (&self.text[start..middle], &self.text[middle..end]);
            start = end;
            pair
        })
    }
}

impl<N: AsRef<str>, V: AsRef<str>> FromIterator<(N, V)> for Labels {
    fn from_iter<I: IntoIterator<Item = (N, V)>>(pairs: I) -> Self {
        let mut pairs: Vec<(N, V)> = pairs.into_iter().collect();
        // The last of a repeated name wins, as in a JSON object read into a map.
        pairs.reverse();
        pairs.sort_by(|a, b| a.0.as_ref().cmp(b.0.as_ref()));
        pairs.dedup_by(|later, earlier| later.0.as_ref() == earlier.0.as_ref());
        let mut labels = Labels::new();
        for (name, value) in &pairs {
            labels.push(name.as_ref(), value.as_ref());
        }
        labels
    }
}

impl std::ops::Index<&str> for Labels {
    type Output = str;

    /// Panics when `name` is not set, like a map's index.
    fn index(&self, name: &str) -> &str {
        match self.get(name) {
            Some(value) => value,
            None => panic!("no label {name:?}"),
        }
    }
}

/// The pairs, in order: two sets are equal when their pairs are, and order as the lists of their
/// pairs do (a sorted map's order).
impl PartialEq for Labels {
    fn eq(&self, other: &Self) -> bool {
        // One text and one list of ends per list of pairs.
        self.ends == other.ends && self.text == other.text
    }
}

impl Eq for Labels {}

impl Hash for Labels {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.ends.hash(state);
        self.text.hash(state);
    }
}

impl Ord for Labels {
    /// Pair by pair, names then values; most comparisons in a merge are of a set with its copy
    /// from another replica, equal, and decided by one comparison of the texts.
    fn cmp(&self, other: &Self) -> Ordering {
        if self == other {
            return Ordering::Equal;
        }
        for i in 0..self.len().min(other.len()) {
            let order = self
                .name(i)
                .cmp(other.name(i))
                .then_with(|| self.value(i).cmp(other.value(i)));
            if order != Ordering::Equal {
                return order;
            }
        }
        self.len().cmp(&other.len())
    }
}

impl PartialOrd for Labels {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl fmt::Debug for Labels {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl Serialize for Labels {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.len()))?;
        for (name, value) in self.iter() {
            map.serialize_entry(name, value)?;
        }
        map.end()
    }
}

thread_local! {
    /// The set being read on this thread (see [`Labels`]'s `Deserialize`).
    static SCRATCH: std::cell::Cell<Labels> = const { std::cell::Cell::new(Labels { text: String::new(), ends: Vec::new() }) };
}

/// The largest scratch text a thread keeps for the next set.
const KEPT_SCRATCH: usize = 64 << 10;

/// Reads a JSON string onto the end of a text, allocating nothing of its own.
struct Append<'a>(&'a mut String);

impl<'de> DeserializeSeed<'de> for Append<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl Visitor<'_> for Append<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string")
    }

    fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<(), E> {
        self.0.push_str(text);
        Ok(())
    }
}

impl<'de> Deserialize<'de> for Labels {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct LabelsVisitor;

        impl<'de> Visitor<'de> for LabelsVisitor {
            type Value = Labels;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object of label names to values")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Labels, A::Error> {
                // Read into this thread's scratch set, then copied once at its size: growing
                // a set label by label reallocates it several times.
                let mut scratch = SCRATCH.take();
                scratch.text.clear();
                scratch.ends.clear();
                let read = read_pairs(&mut map, &mut scratch);
                let labels = read.map(|sorted| {
                    // Prometheus writes them sorted: then this only checked.
                    if sorted {
                        Labels {
                            text: scratch.text.as_str().to_owned(),
                            ends: scratch.ends.clone(),
                        }
                    } else {
                        scratch.iter().collect()
                    }
                });
                // An exceptional set (a huge annotation) is not kept for the thread's life.
                if scratch.text.capacity() <= KEPT_SCRATCH {
                    SCRATCH.set(scratch);
                }
                labels
            }
        }

        /// Reads every pair of `map` into `labels`; whether the names came sorted and unique.
        fn read_pairs<'de, A: MapAccess<'de>>(
            map: &mut A,
            labels: &mut Labels,
        ) -> Result<bool, A::Error> {
            let mut sorted = true;
            // Offsets are 32 bits: a set past 4 GiB is refused, never cut.
            let end = |text: &String| {
                u32::try_from(text.len())
                    .map_err(|_| serde::de::Error::custom("a label set over 4 GiB"))
            };
            while map.next_key_seed(Append(&mut labels.text))?.is_some() {
                labels.ends.push(end(&labels.text)?);
                map.next_value_seed(Append(&mut labels.text))?;
                labels.ends.push(end(&labels.text)?);
                let count = labels.len();
                sorted = sorted && (count < 2 || labels.name(count - 2) < labels.name(count - 1));
            }
            Ok(sorted)
        }

        deserializer.deserialize_map(LabelsVisitor)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_sorted_set_that_reads_and_writes_as_a_json_object() {
        let labels: Labels = serde_json::from_str(r#"{"b":"2","a":"1","b":"3"}"#).unwrap();
        assert_eq!(
            serde_json::to_string(&labels).unwrap(),
            r#"{"a":"1","b":"3"}"#
        );
        let mut labels = labels;
        assert_eq!(labels.insert("c", "4"), None);
        assert_eq!(labels.insert("a", "0"), Some("1".into()));
        labels.retain(|name, _| name != "b");
        assert_eq!(
            serde_json::to_string(&labels).unwrap(),
            r#"{"a":"0","c":"4"}"#
        );
        assert!(labels.contains_key("c") && !labels.contains_key("b"));
        assert_eq!(&labels["c"], "4");
        assert_eq!(labels.get("zz"), None);
    }

    #[test]
    fn order_is_the_map_order() {
        let a: Labels = [("x".to_string(), "1".to_string())].into_iter().collect();
        let b: Labels = [
            ("x".to_string(), "1".to_string()),
            ("y".to_string(), "0".to_string()),
        ]
        .into_iter()
        .collect();
        assert!(a < b);
    }

    /// Against a sorted map of strings (what the set stands for): reads, inserts, removals,
    /// equality and order.
    #[test]
    fn packed_pairs_behave_as_a_sorted_map() {
        use proptest::prelude::*;
        use std::collections::BTreeMap;
        let name = || prop::sample::select(vec!["", "a", "ab", "b", "é", "zz"]);
        let value = || prop::sample::select(vec!["", "1", "z", "c", "\"\\n", "ü"]);
        let pairs = || prop::collection::vec((name(), value()), 0..6);
        let model = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(n, v)| (n.to_string(), v.to_string()))
                .collect()
        };
        let as_list = |map: &BTreeMap<String, String>| -> Vec<(String, String)> {
            map.iter().map(|(n, v)| (n.clone(), v.clone())).collect()
        };
        let check = |a: Vec<(&str, &str)>,
                     b: Vec<(&str, &str)>,
                     put: (&str, &str),
                     set: (&str, &str),
                     drop: [&str; 2]| {
            let (mut map_a, map_b) = (model(&a), model(&b));
            let mut labels: Labels = a.iter().copied().collect();
            let other: Labels = b.iter().copied().collect();
            // Read back from JSON, in the given order (repeats included).
            let object = format!(
                "{{{}}}",
                a.iter()
                    .map(|(n, v)| format!("{}:{}", serde_json::json!(n), serde_json::json!(v)))
                    .collect::<Vec<_>>()
                    .join(",")
            );
            let read: Labels = serde_json::from_str(&object).unwrap();
            prop_assert_eq!(&read, &labels);
            prop_assert_eq!(labels.cmp(&other), as_list(&map_a).cmp(&as_list(&map_b)));
            prop_assert_eq!(labels == other, map_a == map_b);
            prop_assert_eq!(
                labels.insert(put.0, put.1),
                map_a.insert(put.0.into(), put.1.into())
            );
            labels.set(set.0, set.1);
            map_a.insert(set.0.into(), set.1.into());
            labels.remove_all(&drop);
            for name in drop {
                map_a.remove(name);
            }
            let pairs: Vec<(String, String)> = labels
                .iter()
                .map(|(n, v)| (n.to_string(), v.to_string()))
                .collect();
            prop_assert_eq!(&pairs, &as_list(&map_a));
            for name in ["", "a", "ab", "b", "é", "zz"] {
                prop_assert_eq!(labels.get(name), map_a.get(name).map(String::as_str));
            }
            prop_assert_eq!(
                serde_json::to_value(&labels).unwrap(),
                serde_json::to_value(&map_a).unwrap()
            );
            Ok(())
        };
        proptest!(|(a in pairs(), b in pairs(), put in (name(), value()), set in (name(), value()), drop in [name(), name()])| {
            check(a, b, put, set, drop)?;
        });
    }
}
