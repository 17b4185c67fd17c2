//! unreal2: not yet implemented.
