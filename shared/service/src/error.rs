#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    #[error("invalid configuration: {0}")]
    Config(String),
    #[error(transparent)]
    Store(#[from] npcmem_store::StoreError),
    #[error(transparent)]
    Bus(#[from] npcmem_bus::BusError),
    #[error("http listener failed: {0}")]
    Http(#[from] std::io::Error),
    #[error("startup timed out: {0}")]
    StartupTimeout(String),
}
