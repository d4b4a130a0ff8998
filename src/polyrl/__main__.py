from polyrl.cli import main

main()
