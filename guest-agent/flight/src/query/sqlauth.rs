//! Optional authentication of the Flight SQL server: when a user and
//! password are configured, every call must carry them (HTTP Basic) or the
//! bearer token the Handshake answers them with; anything else is
//! Unauthenticated. Without credentials the server is open (as the
//! benchmark's loopback servers are).

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use tonic::Status;
use tonic::metadata::MetadataMap;

/// The accepted `authorization` values.
#[derive(Clone)]
pub struct Auth {
    basic: String,
    bearer: String,
    token: String,
}

impl Auth {
    /// `user:password`, and a fresh random bearer token.
    pub fn new(user: &str, password: &str) -> crate::error::Result<Auth> {
        let token = super::pg::random_password()?;
        Ok(Auth {
            basic: format!("Basic {}", STANDARD.encode(format!("{user}:{password}"))),
            bearer: format!("Bearer {token}"),
            token,
        })
    }

    /// The token a Handshake hands out.
    pub fn token(&self) -> &str {
        &self.token
    }

    /// The `authorization` header a Handshake answers with.
    pub fn bearer(&self) -> &str {
        &self.bearer
    }

    /// Whether `metadata` carries the credentials or the token.
    pub fn check(&self, metadata: &MetadataMap) -> Result<(), Status> {
        let given = metadata
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .ok_or_else(|| Status::unauthenticated("credentials required (basic or bearer)"))?;
        // Constant-time enough for a benchmark server: compare whole values.
        if given == self.basic || given == self.bearer {
            Ok(())
        } else {
            Err(Status::unauthenticated("wrong credentials or token"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn basic_credentials_or_the_token_pass_and_nothing_else() {
        let a = Auth::new("bench", "s3cret").unwrap();
        let with = |v: &str| {
            let mut m = MetadataMap::new();
            m.insert("authorization", v.parse().unwrap());
            a.check(&m)
        };
        assert!(with(&format!("Basic {}", STANDARD.encode("bench:s3cret"))).is_ok());
        assert!(with(&format!("Bearer {}", a.token())).is_ok());
        let wrong = with(&format!("Basic {}", STANDARD.encode("bench:nope"))).unwrap_err();
        assert_eq!(wrong.code(), tonic::Code::Unauthenticated);
        assert!(with("Bearer guess").is_err());
        assert_eq!(
            a.check(&MetadataMap::new()).unwrap_err().code(),
            tonic::Code::Unauthenticated
        );
    }
}
