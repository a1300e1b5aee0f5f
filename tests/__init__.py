"""voxweft tests: unit/ (pure logic), integration/ (real sockets and processes), e2e/."""
