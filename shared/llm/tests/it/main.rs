//! Integration tests: the clients against real HTTP servers on 127.0.0.1, and the
//! circuit breaker on a paused clock. One binary so the suite links once.

mod anthropic;
mod breaker;
mod openai;
mod retries;
mod support;
