//! The one way confighistory hashes bytes: source content (snapshot names and the hash label),
//! pod templates (undo and adoption), over-long label values. Each goes through [`Digest`], so a
//! second implementation is chosen in one place per use, and no other module names a hash crate
//! (tests/layers.rs). Content that must not be guessable from its hash (Secrets,
//! docs/behaviour.md §4a) goes through [`Mac`] instead: [`HmacSha256`], keyed.

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

/// Bytes as lowercase hex (a digest shown, or kept as text).
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The digest of one byte string.
pub fn digest<D: Digest>(bytes: &[u8]) -> [u8; 32] {
    let mut d = D::default();
    d.update(bytes);
    d.finish()
}

/// A keyed digest of bytes, 32 bytes out: [`Digest`]'s shape, but made from a key (so never
/// `Default`): without the key, its output says nothing about the bytes, and nobody can test
/// guesses of them against it.
pub trait Mac {
    fn update(&mut self, bytes: &[u8]);
    fn finish(self) -> [u8; 32];
}

/// HMAC-SHA256 (RFC 2104), RustCrypto's `hmac` over `sha2` (RFC 4231's test vectors below).
/// Holds the two hash states with the padded key absorbed, never the key itself; its `Debug`
/// prints neither.
#[derive(Clone)]
pub struct HmacSha256(hmac::Hmac<sha2::Sha256>);

impl HmacSha256 {
    pub fn new(key: &[u8]) -> HmacSha256 {
        use hmac::Mac as _;
        HmacSha256(hmac::Hmac::<sha2::Sha256>::new_from_slice(key).expect("HMAC takes a key of any length"))
    }
}

impl Mac for HmacSha256 {
    fn update(&mut self, bytes: &[u8]) {
        hmac::Mac::update(&mut self.0, bytes);
    }

    fn finish(self) -> [u8; 32] {
        hmac::Mac::finalize(self.0).into_bytes().into()
    }
}

impl std::fmt::Debug for HmacSha256 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HmacSha256 { .. }")
    }
}

/// The MAC of one byte string under `key`.
pub fn mac(key: &[u8], bytes: &[u8]) -> [u8; 32] {
    let mut m = HmacSha256::new(key);
    m.update(bytes);
    m.finish()
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
        let hex = hex(&d.finish());
        assert_eq!(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
        assert_eq!(digest::<Sha256>(b"abc").to_vec(), hex_bytes(&hex));
    }

    #[test]
    fn hmac_sha256_is_rfc_4231() {
        // RFC 4231 §4.2-4.8: test cases 1-7 (case 5 compares the first 128 bits, as the RFC does).
        let cases: [(Vec<u8>, Vec<u8>, &str); 7] = [
            (vec![0x0b; 20], b"Hi There".to_vec(), "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"),
            (b"Jefe".to_vec(), b"what do ya want for nothing?".to_vec(), "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"),
            (vec![0xaa; 20], vec![0xdd; 50], "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe"),
            ((1..=25).collect(), vec![0xcd; 50], "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b"),
            (vec![0x0c; 20], b"Test With Truncation".to_vec(), "a3b6167473100ee06e0c796c2955552b"),
            (
                vec![0xaa; 131],
                b"Test Using Larger Than Block-Size Key - Hash Key First".to_vec(),
                "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54",
            ),
            (
                vec![0xaa; 131],
                b"This is a test using a larger than block-size key and a larger than block-size data. The key needs to be hashed before being used by the HMAC algorithm.".to_vec(),
                "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2",
            ),
        ];
        for (i, (key, data, want)) in cases.iter().enumerate() {
            let got = hex(&mac(key, data));
            assert_eq!(&got[..want.len()], *want, "RFC 4231 test case {}", i + 1);
            // Fed in pieces, the same.
            let mut m = HmacSha256::new(key);
            for piece in data.chunks(7) {
                m.update(piece);
            }
            assert_eq!(hex(&m.finish()), got);
        }
        // A key of exactly one block is used as it is, one byte more is hashed first.
        assert_ne!(mac(&[1; 64], b"x"), mac(&[1; 65], b"x"));
        assert_ne!(mac(b"k", b"x"), digest::<Sha256>(b"x"));
        assert_eq!(format!("{:?}", HmacSha256::new(b"key")), "HmacSha256 { .. }");
    }

    fn hex_bytes(hex: &str) -> Vec<u8> {
        (0..hex.len()).step_by(2).map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap()).collect()
    }
}
