from zarrfs.commands.cli import main

main()
