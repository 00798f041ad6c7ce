// qstrs specific to the deltachip port (none beyond those found in the sources)
