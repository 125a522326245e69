//! The one way confighistory hashes bytes: source content (snapshot names and the hash label),
//! pod templates (undo and adoption), over-long label values. Each goes through [`Digest`], so a
//! second implementation (a keyed MAC, for content that must not be guessable from its hash) is
//! chosen in one place per use, and no other module names a hash crate (tests/layers.rs).

/// An incremental digest of bytes, 32 bytes out.
pub trait Digest: Default {
    fn update(&mut self, bytes: &[u8]);
    fn finish(self) -> [u8; 32];
}

/// SHA-256: every hash confighistory computes today.
#[derive(Clone, Default)]
pub struct Sha256(sha2::Sha256);

impl Digest for Sha256 {
    fn update(&mut self, bytes: &[u8]) {
        sha2::Digest::update(&mut self.0, bytes);
    }

    fn finish(self) -> [u8; 32] {
        sha2::Digest::finalize(self.0).into()
    }
}

/// The digest of one byte string.
pub fn digest<D: Digest>(bytes: &[u8]) -> [u8; 32] {
    let mut d = D::default();
    d.update(bytes);
    d.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sha256_is_sha256() {
        // FIPS 180-2's "abc", fed in two pieces.
        let mut d = Sha256::default();
        d.update(b"a");
        d.update(b"bc");
        let hex: String = d.finish().iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
        assert_eq!(digest::<Sha256>(b"abc").to_vec(), hex_bytes(&hex));
    }

    fn hex_bytes(hex: &str) -> Vec<u8> {
        (0..hex.len()).step_by(2).map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap()).collect()
    }
}
