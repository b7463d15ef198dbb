//! Algorithm preferences for connections whose both ends are `multinode`
//! (a client of this job and its agents).
//!
//! Key exchange: `curve25519-sha256` first. russh prefers the hybrid
//! `mlkem768x25519-sha256`, whose ML-KEM half (pure Rust, software Keccak)
//! costs about as much CPU as everything else in a connection together; with
//! thousands of connections set up from one head, that is the launch time
//! (docs/benchmarks.md). curve25519 is what OpenSSH peers in the benchmarks
//! use too. The hybrid stays in the list, so an OpenSSH client that prefers
//! it still gets it from an agent.
//!
//! Cipher: `aes256-gcm@openssh.com` first where the CPU has AES and carry-less
//! multiply instructions. ring's `chacha20-poly1305@openssh.com` runs Poly1305
//! in portable C (about 8 instructions a byte); its AES-GCM is assembly, and
//! passing output on is bound by the cipher on both ends. Without those
//! instructions ChaCha20-Poly1305 stays first, as it is faster in software.

use std::borrow::Cow;

use russh::{Preferred, cipher, kex};

/// Key exchanges offered between a `multinode` client and an agent, most
/// preferred first. The `ext-info`/`kex-strict` pseudo-algorithms must stay:
/// russh only sends the ones of its own side.
const AGENT_KEX: &[kex::Name] = &[
    kex::CURVE25519,
    kex::CURVE25519_PRE_RFC_8731,
    kex::MLKEM768X25519_SHA256,
    kex::DH_GEX_SHA256,
    kex::DH_G16_SHA512,
    kex::DH_G14_SHA256,
    kex::EXTENSION_SUPPORT_AS_CLIENT,
    kex::EXTENSION_SUPPORT_AS_SERVER,
    kex::EXTENSION_OPENSSH_STRICT_KEX_AS_CLIENT,
    kex::EXTENSION_OPENSSH_STRICT_KEX_AS_SERVER,
];

const CIPHERS_AES_FIRST: &[cipher::Name] = &[
    cipher::AES_256_GCM,
    cipher::CHACHA20_POLY1305,
    cipher::AES_256_CTR,
    cipher::AES_192_CTR,
    cipher::AES_128_CTR,
];

const CIPHERS_CHACHA_FIRST: &[cipher::Name] = &[
    cipher::CHACHA20_POLY1305,
    cipher::AES_256_GCM,
    cipher::AES_256_CTR,
    cipher::AES_192_CTR,
    cipher::AES_128_CTR,
];

/// Whether AES-GCM runs in hardware here.
fn aes_gcm_in_hardware() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("aes")
            && std::arch::is_x86_feature_detected!("pclmulqdq")
    }
    #[cfg(target_arch = "aarch64")]
    {
        std::arch::is_aarch64_feature_detected!("aes")
            && std::arch::is_aarch64_feature_detected!("pmull")
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        false
    }
}

/// The preferences of agent connections, both sides.
pub(crate) fn agent_preferred() -> Preferred {
    Preferred {
        kex: Cow::Borrowed(AGENT_KEX),
        cipher: Cow::Borrowed(if aes_gcm_in_hardware() {
            CIPHERS_AES_FIRST
        } else {
            CIPHERS_CHACHA_FIRST
        }),
        ..Preferred::DEFAULT
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_default_extension_is_kept() {
        for name in Preferred::DEFAULT.kex.iter() {
            if name.as_ref().starts_with("ext-info") || name.as_ref().starts_with("kex-strict") {
                assert!(AGENT_KEX.contains(name), "{} dropped", name.as_ref());
            }
        }
        assert_eq!(agent_preferred().kex[0], kex::CURVE25519);
    }

    #[test]
    fn both_cipher_orders_offer_the_default_ciphers() {
        for order in [CIPHERS_AES_FIRST, CIPHERS_CHACHA_FIRST] {
            for name in Preferred::DEFAULT.cipher.iter() {
                assert!(order.contains(name), "{} dropped", name.as_ref());
            }
        }
    }
}
