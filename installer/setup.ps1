# Elastic Chat set-up for Windows (PowerShell 5.1 or 7).
#
#   powershell -ExecutionPolicy Bypass -File installer\setup.ps1            install, add shortcuts, start the app
#   powershell -ExecutionPolicy Bypass -File installer\setup.ps1 -Test      install with test extras, run ruff, then the tests
#   powershell -ExecutionPolicy Bypass -File installer\setup.ps1 -Uninstall [-Purge]
#
# On a PC with an NVIDIA GPU the CUDA build of torch comes from PyTorch's own package index
# (PyPI's Windows wheel is CPU-only). Shortcuts run pythonw.exe, so no console window opens.
[CmdletBinding()]
param([switch]$Test, [switch]$Uninstall, [switch]$Purge, [Parameter(ValueFromRemainingArguments)]$Rest)

$ErrorActionPreference = "Stop"
$Root = Split-Path -Parent $PSScriptRoot
$Venv = Join-Path $Root ".venv"
$VPy = Join-Path $Venv "Scripts\python.exe"
$VPyw = Join-Path $Venv "Scripts\pythonw.exe"
$TorchVersion = "2.13.0"
$CudaIndex = "https://download.pytorch.org/whl/cu128"
$StartMenu = Join-Path ([Environment]::GetFolderPath("Programs")) "Elastic Chat.lnk"
$DesktopLink = Join-Path ([Environment]::GetFolderPath("Desktop")) "Elastic Chat.lnk"

function Say($Message) { Write-Host "[setup] $Message" }
function Fail($Message) { Write-Host "[setup] error: $Message" -ForegroundColor Red; exit 1 }

# The app's folders, as the app itself says (runtime\paths.py, the rules the app runs on; any Python 3
# will do, so this works when .venv is gone): "remove<TAB>folder" or "keep<TAB>folder<TAB>why" lines.
function Ask-Purgeable {
    $paths = Join-Path $Root "runtime\paths.py"
    foreach ($candidate in @($VPy, "py", "python")) {
        if ((Test-Path $candidate) -or (Get-Command $candidate -ErrorAction SilentlyContinue)) {
            $lines = & $candidate -I $paths --purgeable 2>$null
            if ($LASTEXITCODE -eq 0) { return ,@($lines | Where-Object { $_ }) }
        }
    }
    return $null
}

if ($Uninstall) {
    $answer = Ask-Purgeable  # before .venv goes: its Python is the first asked
    foreach ($link in @($StartMenu, $DesktopLink)) {
        if (Test-Path $link) { Remove-Item $link; Say "removed $link" }
    }
    if (Test-Path $Venv) { Remove-Item -Recurse -Force $Venv; Say "removed $Venv" }
    if ($null -eq $answer) {
        Say "could not ask Elastic Chat where it keeps your chats (no Python found); nothing of yours was removed"
        exit 0
    }
    if ($answer.Count -eq 0) { Say "Elastic Chat has no chats, settings or downloaded models here to remove" }
    foreach ($line in $answer) {
        $verdict, $folder, $why = $line -split "`t", 3
        if ($Purge -and $verdict -eq "remove") {
            Remove-Item -Recurse -Force -LiteralPath $folder
            Say "removed your chats, settings and downloaded models in $folder"
        } elseif ($verdict -eq "remove") {
            Say "kept your chats, settings and downloaded models in $folder (add -Purge to remove them)"
        } else {
            Say "kept ${folder}: $why"
        }
    }
    exit 0
}

function Find-Python {
    foreach ($candidate in @("py -3.13", "py -3.12", "py -3.11", "python")) {
        $exe, $arg = $candidate.Split(" ", 2)
        if (Get-Command $exe -ErrorAction SilentlyContinue) {
            $ok = & $exe $arg -c "import sys; print(sys.version_info >= (3, 11))" 2>$null
            if ($ok -eq "True") { return @($exe, $arg) }
        }
    }
    Fail "Python 3.11 or newer is needed: install it from python.org (tick 'Add python.exe to PATH')"
}

if (-not (Test-Path $VPy)) {
    $py = Find-Python
    Say "creating $Venv"
    if ($py[1]) { & $py[0] $py[1] -m venv $Venv } else { & $py[0] -m venv $Venv }
    if ($LASTEXITCODE -ne 0) { Fail "could not create the virtual environment" }
}

$HasGpu = $false
if (Get-Command nvidia-smi -ErrorAction SilentlyContinue) {
    $HasGpu = [bool](& nvidia-smi -L 2>$null | Select-String "^GPU ")
}

$Mode = if ($Test) { "test" } else { "app" }
$Kind = if ($HasGpu) { "cuda" } else { "cpu" }
$Hash = (Get-FileHash (Join-Path $Root "pyproject.toml")).Hash.Substring(0, 16)
$Stamp = Join-Path $Venv ".elastic-chat-setup"
$Want = "$Hash $Mode $Kind"
if (-not (Test-Path $Stamp) -or (Get-Content $Stamp) -ne $Want) {
    $have = & $VPy -c "import torch; print(torch.__version__.split('+')[0])" 2>$null
    if ($have -ne $TorchVersion) {
        Say "installing torch $TorchVersion ($Kind build)"
        if ($HasGpu) { & $VPy -m pip install --quiet "torch==$TorchVersion" --index-url $CudaIndex }
        else { & $VPy -m pip install --quiet "torch==$TorchVersion" }
        if ($LASTEXITCODE -ne 0) { Fail "installing torch failed; check the network and run this script again" }
    }
    $Extras = @()
    if ($Test) { $Extras += "test" }
    if ($HasGpu) { $Extras += "gpu" }  # triton-windows: the fused NVFP4/FP8 kernels
    $Extra = if ($Extras.Count) { "[" + ($Extras -join ",") + "]" } else { "" }
    Say "installing Elastic Chat$Extra"
    & $VPy -m pip install --quiet -e "$Root$Extra"
    if ($LASTEXITCODE -ne 0) { Fail "installing the app failed; check the network and run this script again" }
    Set-Content -Path $Stamp -Value $Want
}

Set-Location $Root
if ($Test) {
    $env:QT_QPA_PLATFORM = "offscreen"
    $env:HF_HUB_OFFLINE = "1"
    Say "checking the code with ruff (its rules: pyproject.toml's [tool.ruff])"
    & $VPy -m ruff check $Root
    if ($LASTEXITCODE -ne 0) { Fail "ruff found the problems listed above; fix them, then run the tests again" }
    & $VPy -m pytest @Rest
    exit $LASTEXITCODE
}

$Shell = New-Object -ComObject WScript.Shell
foreach ($link in @($StartMenu, $DesktopLink)) {
    $shortcut = $Shell.CreateShortcut($link)
    $shortcut.TargetPath = $VPyw
    $shortcut.Arguments = "-m app.main"
    $shortcut.WorkingDirectory = $Root
    $shortcut.IconLocation = Join-Path $Root "assets\icon.ico"
    $shortcut.Description = "Chat with NVIDIA's elastic reasoning models"
    $shortcut.Save()
    Say "created $link"
}
& $VPyw -m app.main @Rest
