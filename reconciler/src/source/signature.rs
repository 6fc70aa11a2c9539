//! Commit-signature verification against configured public keys (optional; Flux-style).
//!
//! Both kinds git writes into the `gpgsig` header are verified in-process (no `gpg` or `ssh`
//! binary needed in the reconciler's image):
//! - SSH signatures (`gpg.format=ssh`) with the `ssh-key` crate: namespace `git`, the signing
//!   key must be one of the allowed keys, the signature must cover the commit bytes;
//! - OpenPGP signatures (`gpg.format=openpgp`, the default) with the `pgp` crate: the
//!   signature must verify against the primary key or a subkey of an allowed public key.
//!   Allowed keys must carry valid self-signatures; key expiry and revocation are not
//!   evaluated (an allowed-keys list is the trust decision).
//!
//! X.509 (`gpgsm`) signatures are refused as unsupported, so a policy that requires signatures
//! never passes a commit it cannot check.

use gix::ObjectId;
use pgp::composed::{Deserializable, DetachedSignature, SignedPublicKey};
use pgp::types::KeyDetails;
use ssh_key::{HashAlg, PublicKey, SshSig};

use super::repo::{GitRepo, RepoError};

/// The namespace git uses for SSH commit signatures.
const GIT_NAMESPACE: &str = "git";

/// Why a head commit is refused.
#[derive(Debug, thiserror::Error)]
pub enum SignatureError {
    /// Verification is required and the commit carries no signature.
    #[error("commit {commit} is not signed; signature verification is required")]
    Unsigned {
        /// The commit.
        commit: String,
    },
    /// The signature does not verify against the commit, or was made by a key not allowed.
    #[error("commit {commit} has an invalid signature: {reason}")]
    Invalid {
        /// The commit.
        commit: String,
        /// Why.
        reason: String,
    },
    /// The signature is of a kind this build cannot verify.
    #[error(
        "commit {commit} is signed with {format}, which this reconciler cannot verify; use SSH signatures"
    )]
    Unsupported {
        /// The commit.
        commit: String,
        /// The format seen.
        format: String,
    },
    /// An allowed key does not parse.
    #[error("allowed signing key #{index} cannot be parsed: {reason}")]
    BadKey {
        /// 1-based position in the configured list.
        index: usize,
        /// Why.
        reason: String,
    },
    /// The commit could not be read.
    #[error(transparent)]
    Repo(#[from] RepoError),
}

/// The keys allowed to sign head commits.
#[derive(Clone, Debug, Default)]
pub struct SignaturePolicy {
    keys: Vec<PublicKey>,
    pgp_keys: Vec<SignedPublicKey>,
}

/// Who signed a verified commit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VerifiedSignature {
    /// The commit.
    pub commit: String,
    /// SHA256 fingerprint of the signing key (`SHA256:…`).
    pub fingerprint: String,
    /// The key's comment, if any (often the signer's e-mail).
    pub comment: String,
}

impl SignaturePolicy {
    /// Parse allowed keys in OpenSSH public-key format (`ssh-ed25519 AAAA… comment`), one per
    /// entry; blank lines and `#` comments are skipped when given a whole file's lines.
    pub fn from_openssh_keys<'a>(
        keys: impl IntoIterator<Item = &'a str>,
    ) -> Result<Self, SignatureError> {
        let mut parsed = Vec::new();
        for (i, line) in keys.into_iter().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            // allowed_signers lines start with principals; the key starts at its type.
            let key_text = line
                .find("ssh-")
                .or_else(|| line.find("ecdsa-"))
                .map(|at| &line[at..])
                .unwrap_or(line);
            let key = PublicKey::from_openssh(key_text).map_err(|e| SignatureError::BadKey {
                index: i + 1,
                reason: e.to_string(),
            })?;
            parsed.push(key);
        }
        Ok(SignaturePolicy {
            keys: parsed,
            pgp_keys: Vec::new(),
        })
    }

    /// Also allow the OpenPGP public keys in `armored` (one or more `PUBLIC KEY BLOCK`s, as
    /// `gpg --armor --export` prints them). Keys with broken self-signatures are refused.
    pub fn with_openpgp_keys(mut self, armored: &str) -> Result<Self, SignatureError> {
        let bad = |reason: String| SignatureError::BadKey {
            index: self.keys.len() + self.pgp_keys.len() + 1,
            reason,
        };
        let mut added = Vec::new();
        // An allow-list is often several exported keys concatenated: each armored block is
        // parsed on its own (the armor reader stops at the end of the first block).
        for block in armored_blocks(armored) {
            let (keys, _) = SignedPublicKey::from_string_many(block)
                .map_err(|e| bad(format!("not an OpenPGP public key block: {e}")))?;
            for key in keys {
                let key = key.map_err(|e| bad(format!("unreadable OpenPGP key: {e}")))?;
                key.verify_bindings().map_err(|e| {
                    bad(format!(
                        "OpenPGP key {} has invalid self-signatures: {e}",
                        key.fingerprint()
                    ))
                })?;
                added.push(key);
            }
        }
        if added.is_empty() {
            return Err(bad("no OpenPGP public key in the block".to_owned()));
        }
        self.pgp_keys.extend(added);
        Ok(self)
    }

    /// Number of allowed keys.
    pub fn len(&self) -> usize {
        self.keys.len() + self.pgp_keys.len()
    }

    /// Whether no key is allowed (then every commit is refused).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Verify `commit`'s signature; `Ok` names the signer.
    pub fn verify_commit(
        &self,
        git: &GitRepo,
        commit: ObjectId,
    ) -> Result<VerifiedSignature, SignatureError> {
        let Some(sig) = git.commit_signature(commit)? else {
            return Err(SignatureError::Unsigned {
                commit: commit.to_string(),
            });
        };
        self.verify_bytes(&commit.to_string(), &sig.signature, &sig.payload)
    }

    /// Verify an armored signature over `payload` (the commit bytes without the header).
    pub fn verify_bytes(
        &self,
        commit: &str,
        signature: &[u8],
        payload: &[u8],
    ) -> Result<VerifiedSignature, SignatureError> {
        let text = String::from_utf8_lossy(signature);
        if text.contains("BEGIN PGP SIGNATURE") {
            return self.verify_openpgp(commit, &text, payload);
        }
        if text.contains("BEGIN SIGNED MESSAGE") {
            return Err(SignatureError::Unsupported {
                commit: commit.to_owned(),
                format: "an X.509 (gpgsm) signature".to_owned(),
            });
        }
        let invalid = |reason: String| SignatureError::Invalid {
            commit: commit.to_owned(),
            reason,
        };
        let sshsig = SshSig::from_pem(text.trim().as_bytes())
            .map_err(|e| invalid(format!("not a readable SSH signature: {e}")))?;
        if sshsig.namespace() != GIT_NAMESPACE {
            return Err(invalid(format!(
                "signature namespace is {:?}, expected {GIT_NAMESPACE:?}",
                sshsig.namespace()
            )));
        }
        let Some(key) = self
            .keys
            .iter()
            .find(|k| k.key_data() == sshsig.public_key())
        else {
            let signer = PublicKey::from(sshsig.public_key().clone());
            return Err(invalid(format!(
                "signed by key {} which is not an allowed signing key",
                signer.fingerprint(HashAlg::Sha256)
            )));
        };
        key.verify(GIT_NAMESPACE, payload, &sshsig)
            .map_err(|e| invalid(format!("signature does not match the commit: {e}")))?;
        Ok(VerifiedSignature {
            commit: commit.to_owned(),
            fingerprint: key.fingerprint(HashAlg::Sha256).to_string(),
            comment: key.comment().to_owned(),
        })
    }

    fn verify_openpgp(
        &self,
        commit: &str,
        armored: &str,
        payload: &[u8],
    ) -> Result<VerifiedSignature, SignatureError> {
        let invalid = |reason: String| SignatureError::Invalid {
            commit: commit.to_owned(),
            reason,
        };
        let (sig, _) = DetachedSignature::from_string(armored.trim())
            .map_err(|e| invalid(format!("not a readable OpenPGP signature: {e}")))?;
        let issuers: Vec<String> = sig
            .signature
            .issuer_fingerprint()
            .iter()
            .map(|f| f.to_string())
            .chain(sig.signature.issuer_key_id().iter().map(|k| k.to_string()))
            .collect();
        for key in &self.pgp_keys {
            let user = key
                .details
                .users
                .first()
                .map(|u| String::from_utf8_lossy(u.id.id()).into_owned())
                .unwrap_or_default();
            if sig.verify(&key.primary_key, payload).is_ok() {
                return Ok(VerifiedSignature {
                    commit: commit.to_owned(),
                    fingerprint: format!("OpenPGP:{}", key.fingerprint()),
                    comment: user,
                });
            }
            for sub in &key.public_subkeys {
                if sig.verify(&sub.key, payload).is_ok() {
                    return Ok(VerifiedSignature {
                        commit: commit.to_owned(),
                        fingerprint: format!("OpenPGP:{}", key.fingerprint()),
                        comment: user,
                    });
                }
            }
        }
        Err(invalid(format!(
            "OpenPGP signature by {} does not verify against any allowed key",
            if issuers.is_empty() {
                "an unnamed key".to_owned()
            } else {
                issuers.join("/")
            }
        )))
    }
}

/// The armored public key blocks of `text`, each from its BEGIN line through its END line;
/// text between blocks (comments, blank lines) is ignored. Text without any BEGIN line is
/// returned whole, so the parser reports what is wrong with it.
fn armored_blocks(text: &str) -> Vec<&str> {
    const BEGIN: &str = "-----BEGIN PGP PUBLIC KEY BLOCK-----";
    const END: &str = "-----END PGP PUBLIC KEY BLOCK-----";
    let mut blocks = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find(BEGIN) {
        let after = &rest[start..];
        let Some(end) = after.find(END) else {
            blocks.push(after);
            break;
        };
        blocks.push(&after[..end + END.len()]);
        rest = &after[end + END.len()..];
    }
    if blocks.is_empty() {
        blocks.push(text);
    }
    blocks
}
