//! Shuffle sharding: a flow's hash deals it a hand of distinct queues out of a deck.
//!
//! The hash is read as a mixed-radix number: its first digit (base `deck`) picks one card,
//! the next digit (base `deck - 1`) picks among the cards not dealt yet, and so on for
//! `hand` cards. Every ordered hand is reachable and, for a uniform hash, equally likely.
//! Only the low [`MAX_HASH_BITS`] bits of entropy may be consumed: past that the last
//! digits are visibly biased, so configurations needing more are refused (the same rule
//! the PriorityLevelConfiguration validation applies to `queues` and `handSize`).

/// The most hash bits a deal may consume.
pub const MAX_HASH_BITS: u32 = 60;

/// The largest deck (number of queues) a dealer accepts.
pub const MAX_DECK_SIZE: u32 = 1 << 26;

/// A quick, slightly conservative estimate of the hash bits consumed by dealing `hand`
/// cards from a deck of `deck`: `ceil(log2(deck) · hand)`. Meaningful for
/// `1 <= hand <= deck`; a zero deck or hand needs no entropy (0).
pub fn required_entropy_bits(deck: u32, hand: u32) -> u32 {
    if deck == 0 || hand == 0 {
        return 0;
    }
    let bits = (f64::from(deck).log2() * f64::from(hand)).ceil();
    // Absurd sizes (never valid for a dealer) saturate rather than wrap.
    if bits >= f64::from(u32::MAX) {
        u32::MAX
    } else {
        bits as u32
    }
}

/// Why a deck and hand size cannot make a [`Dealer`] (upstream's messages).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DealerError {
    #[error("deckSize {deck} or handSize {hand} is not positive")]
    NotPositive { deck: u32, hand: u32 },
    #[error("handSize {hand} is greater than deckSize {deck}")]
    HandLargerThanDeck { deck: u32, hand: u32 },
    #[error("deckSize {deck} is impractically large")]
    DeckTooLarge { deck: u32 },
    #[error("required entropy bits of deckSize {deck} and handSize {hand} is greater than {MAX_HASH_BITS}")]
    TooManyEntropyBits { deck: u32, hand: u32 },
}

/// Deals hands of `hand` distinct cards in `0..deck` from a hash value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dealer {
    deck: u32,
    hand: u32,
}

impl Dealer {
    /// A dealer for the given deck and hand sizes, or why they are unusable.
    pub fn new(deck: u32, hand: u32) -> Result<Dealer, DealerError> {
        if deck == 0 || hand == 0 {
            return Err(DealerError::NotPositive { deck, hand });
        }
        if hand > deck {
            return Err(DealerError::HandLargerThanDeck { deck, hand });
        }
        if deck > MAX_DECK_SIZE {
            return Err(DealerError::DeckTooLarge { deck });
        }
        if required_entropy_bits(deck, hand) > MAX_HASH_BITS {
            return Err(DealerError::TooManyEntropyBits { deck, hand });
        }
        Ok(Dealer { deck, hand })
    }

    /// The number of cards in the deck (queues).
    pub fn deck(&self) -> u32 {
        self.deck
    }

    /// The number of cards dealt per hash.
    pub fn hand(&self) -> u32 {
        self.hand
    }

    /// Calls `pick` once per dealt card, in dealing order.
    pub fn deal_each(&self, hash: u64, mut pick: impl FnMut(u32)) {
        // The entropy rule bounds the hand: log2(deck) >= 1 for deck >= 2 gives hand <= 60,
        // and in practice hand <= 15; a fixed buffer of 64 digits covers every valid dealer.
        let mut digits = [0u32; 64];
        let hand = self.hand.min(64) as usize;
        let mut rest = hash;
        for (i, digit) in digits.iter_mut().enumerate().take(hand) {
            // Base deck - i counts the cards still in the deck for the i-th pick.
            let base = u64::from(self.deck - i as u32);
            *digit = (rest % base) as u32;
            rest /= base;
        }
        for i in 0..hand {
            // Digit i indexes the cards not yet dealt. Walking the earlier digits from the
            // most recent back, each one at or below the candidate shifts it up past a card
            // already taken; this maps the digit onto the i-th remaining card in order.
            let mut card = digits[i];
            for earlier in digits[..i].iter().rev() {
                if card >= *earlier {
                    card += 1;
                }
            }
            pick(card);
        }
    }

    /// The dealt hand, in dealing order.
    pub fn deal(&self, hash: u64) -> Vec<u32> {
        let mut cards = Vec::with_capacity(self.hand as usize);
        self.deal_each(hash, |card| cards.push(card));
        cards
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::collections::{BTreeSet, HashSet};

    /// A deterministic, well-mixed stream of 64-bit values (SplitMix64).
    pub(crate) struct SplitMix(pub u64);

    impl SplitMix {
        pub(crate) fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        }
    }

    #[test]
    fn new_accepts_valid_sizes_and_refuses_the_rest_with_upstream_messages() {
        struct Case {
            name: &'static str,
            deck: u32,
            hand: u32,
            err: Option<&'static str>,
        }
        let cases = [
            Case { name: "bootstrap workload-low 128/6", deck: 128, hand: 6, err: None },
            Case { name: "default 64/8", deck: 64, hand: 8, err: None },
            Case { name: "one queue one card", deck: 1, hand: 1, err: None },
            Case { name: "hand equals deck", deck: 15, hand: 15, err: None },
            Case { name: "exactly 60 bits: 1024/6", deck: 1024, hand: 6, err: None },
            Case { name: "56 bits: 128/8", deck: 128, hand: 8, err: None },
            Case { name: "zero deck", deck: 0, hand: 1, err: Some("deckSize 0 or handSize 1 is not positive") },
            Case { name: "zero hand", deck: 8, hand: 0, err: Some("deckSize 8 or handSize 0 is not positive") },
            Case { name: "hand above deck", deck: 4, hand: 5, err: Some("handSize 5 is greater than deckSize 4") },
            Case {
                name: "deck too large",
                deck: (1 << 26) + 1,
                hand: 1,
                err: Some("deckSize 67108865 is impractically large"),
            },
            Case {
                name: "64 bits: 256/8",
                deck: 256,
                hand: 8,
                err: Some("required entropy bits of deckSize 256 and handSize 8 is greater than 60"),
            },
            Case {
                name: "63 bits: 512/7",
                deck: 512,
                hand: 7,
                err: Some("required entropy bits of deckSize 512 and handSize 7 is greater than 60"),
            },
            Case {
                name: "16 cards from 17: 66 bits",
                deck: 17,
                hand: 16,
                err: Some("required entropy bits of deckSize 17 and handSize 16 is greater than 60"),
            },
        ];
        for c in &cases {
            let got = Dealer::new(c.deck, c.hand);
            match c.err {
                None => {
                    let d = got.unwrap_or_else(|e| panic!("{}: unexpected error {e}", c.name));
                    assert_eq!((d.deck(), d.hand()), (c.deck, c.hand), "{}", c.name);
                }
                Some(want) => assert_eq!(got.map_err(|e| e.to_string()), Err(want.to_string()), "{}", c.name),
            }
        }
    }

    #[test]
    fn required_entropy_bits_is_ceil_log2_deck_times_hand() {
        let cases: &[(&str, u32, u32, u32)] = &[
            ("64/8", 64, 8, 48),
            ("128/6", 128, 6, 42),
            ("100/3 rounds up", 100, 3, 20), // 6.64 · 3 = 19.93
            ("1024/6", 1024, 6, 60),
            ("256/8", 256, 8, 64),
            ("deck 1 needs nothing", 1, 1, 0),
            ("zero deck", 0, 4, 0),
            ("zero hand", 64, 0, 0),
        ];
        for (name, deck, hand, want) in cases {
            assert_eq!(required_entropy_bits(*deck, *hand), *want, "{name}");
        }
    }

    #[test]
    fn every_ordered_hand_is_dealt_exactly_once_over_the_whole_hash_range() {
        // For a small deck the hashes below deck·(deck-1)·…·(deck-hand+1) enumerate every
        // digit tuple once; the deal must map them one-to-one onto the ordered hands.
        for deck in 1..=7u32 {
            for hand in 1..=deck {
                let name = format!("deck {deck} hand {hand}");
                let dealer = Dealer::new(deck, hand).unwrap();
                let permutations: u64 = (0..hand).map(|i| u64::from(deck - i)).product();
                let mut seen = HashSet::new();
                for hash in 0..permutations {
                    let cards = dealer.deal(hash);
                    assert_eq!(cards.len(), hand as usize, "{name} hash {hash}");
                    let distinct: BTreeSet<u32> = cards.iter().copied().collect();
                    assert_eq!(distinct.len(), cards.len(), "{name} hash {hash}: repeated card in {cards:?}");
                    assert!(cards.iter().all(|c| *c < deck), "{name} hash {hash}: card out of deck {cards:?}");
                    assert!(seen.insert(cards.clone()), "{name} hash {hash}: hand {cards:?} dealt twice");
                }
                assert_eq!(seen.len() as u64, permutations, "{name}");
            }
        }
    }

    #[test]
    fn hands_are_distinct_for_many_hashes_on_production_sized_decks() {
        let cases: &[(&str, u32, u32)] =
            &[("64/8", 64, 8), ("128/6", 128, 6), ("16/4", 16, 4), ("1024/6", 1024, 6), ("15/15", 15, 15)];
        for (name, deck, hand) in cases {
            let dealer = Dealer::new(*deck, *hand).unwrap();
            let mut rng = SplitMix(u64::from(*deck) << 8 | u64::from(*hand));
            for hash in (0..20_000).map(|_| rng.next()).chain([0, u64::MAX, u64::MAX / 3]) {
                let cards = dealer.deal(hash);
                let distinct: BTreeSet<u32> = cards.iter().copied().collect();
                assert_eq!(distinct.len(), *hand as usize, "{name} hash {hash:#x}: {cards:?}");
                assert!(cards.iter().all(|c| c < deck), "{name} hash {hash:#x}: {cards:?}");
            }
        }
    }

    #[test]
    fn deal_each_yields_the_same_cards_as_deal() {
        let dealer = Dealer::new(64, 8).unwrap();
        let mut rng = SplitMix(7);
        for _ in 0..100 {
            let hash = rng.next();
            let mut each = Vec::new();
            dealer.deal_each(hash, |c| each.push(c));
            assert_eq!(each, dealer.deal(hash), "deal_each vs deal for {hash:#x}");
        }
    }

    #[test]
    fn cards_and_positions_spread_evenly_over_a_large_sample() {
        // Each card should appear in a hand with probability hand/deck, and at each position
        // with probability 1/deck. Allow six standard deviations of the binomial count.
        let cases: &[(&str, u32, u32, u64)] =
            &[("64/8", 64, 8, 100_000), ("128/6", 128, 6, 100_000), ("5/3", 5, 3, 30_000)];
        for (name, deck, hand, samples) in cases {
            let dealer = Dealer::new(*deck, *hand).unwrap();
            let mut rng = SplitMix(0xC0FFEE ^ u64::from(*deck));
            let mut in_hand = vec![0u64; *deck as usize];
            let mut at_position = vec![vec![0u64; *deck as usize]; *hand as usize];
            for _ in 0..*samples {
                for (pos, card) in dealer.deal(rng.next()).into_iter().enumerate() {
                    in_hand[card as usize] += 1;
                    at_position[pos][card as usize] += 1;
                }
            }
            let n = *samples as f64;
            let check = |what: &str, counts: &[u64], p: f64| {
                let mean = n * p;
                let tolerance = 6.0 * (n * p * (1.0 - p)).sqrt();
                for (card, count) in counts.iter().enumerate() {
                    let off = (*count as f64 - mean).abs();
                    assert!(
                        off <= tolerance,
                        "{name}: {what}: card {card} seen {count} times, expected {mean:.0} ± {tolerance:.0}"
                    );
                }
            };
            check("in hand", &in_hand, f64::from(*hand) / f64::from(*deck));
            for (pos, counts) in at_position.iter().enumerate() {
                check(&format!("position {pos}"), counts, 1.0 / f64::from(*deck));
            }
        }
    }
}
