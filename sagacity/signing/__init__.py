"""Keys and signatures: Ed25519 key files, the decisions', operators' and writers'
signatures, and which writer may write which event."""
