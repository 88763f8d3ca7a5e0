from zarrfs.cli import main

main()
