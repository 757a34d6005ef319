use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Token usage of one model call, one turn, one agent or a whole thread.
///
/// `input_tokens` counts every prompt token, including the cached ones;
/// `cached_input_tokens` says how many of them were read from the
/// provider's prompt cache, and `cache_creation_tokens` how many were
/// written to it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Usage {
    /// Prompt tokens, cached ones included.
    #[serde(default)]
    pub input_tokens: u64,
    /// Prompt tokens served from the provider's cache.
    #[serde(default)]
    pub cached_input_tokens: u64,
    /// Prompt tokens written to the provider's cache.
    #[serde(default)]
    pub cache_creation_tokens: u64,
    /// Completion tokens, reasoning tokens included.
    #[serde(default)]
    pub output_tokens: u64,
}

impl Usage {
    /// Adds `other` to `self`, saturating instead of overflowing.
    pub fn add(&mut self, other: &Usage) {
        self.input_tokens = self.input_tokens.saturating_add(other.input_tokens);
        self.cached_input_tokens = self
            .cached_input_tokens
            .saturating_add(other.cached_input_tokens);
        self.cache_creation_tokens = self
            .cache_creation_tokens
            .saturating_add(other.cache_creation_tokens);
        self.output_tokens = self.output_tokens.saturating_add(other.output_tokens);
    }

    /// Input plus output tokens.
    pub fn total_tokens(&self) -> u64 {
        self.input_tokens.saturating_add(self.output_tokens)
    }

    /// True when every counter is zero.
    pub fn is_zero(&self) -> bool {
        *self == Usage::default()
    }
}

impl std::ops::AddAssign for Usage {
    fn add_assign(&mut self, rhs: Self) {
        self.add(&rhs);
    }
}

impl std::iter::Sum for Usage {
    fn sum<I: Iterator<Item = Usage>>(iter: I) -> Self {
        let mut total = Usage::default();
        for u in iter {
            total.add(&u);
        }
        total
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_adds_and_saturates() {
        let mut a = Usage {
            input_tokens: 10,
            cached_input_tokens: 4,
            cache_creation_tokens: 1,
            output_tokens: 5,
        };
        a += Usage {
            input_tokens: u64::MAX,
            cached_input_tokens: 1,
            cache_creation_tokens: 2,
            output_tokens: 3,
        };
        assert_eq!(a.input_tokens, u64::MAX);
        assert_eq!(a.cached_input_tokens, 5);
        assert_eq!(a.cache_creation_tokens, 3);
        assert_eq!(a.output_tokens, 8);
    }

    #[test]
    fn usage_reads_missing_fields_as_zero() {
        let u: Usage = serde_json::from_str(r#"{"input_tokens":3}"#).unwrap();
        assert_eq!(u.input_tokens, 3);
        assert_eq!(u.output_tokens, 0);
        assert_eq!(u.total_tokens(), 3);
    }
}
